// Package engine is the simulation core of mocker: mock LLM workers whose
// schedulers and KV pools behave like vLLM's, SGLang's or TensorRT-LLM's,
// with exact block accounting.
//
// # A driven core
//
// A Worker never starts a goroutine, reads a clock or does I/O. The caller
// hands it inputs (Submit, ReleaseHeld, Cancel, and the handoff steps
// StartTransfer, Reserve, Activate, CancelDestination, DestinationReady),
// each with the
// modeled time `now`, calls Step(now) to run a forward pass, and asks
// NextWake when the worker next needs attention: the end of a pass, a
// handoff deadline, or the landing of a copy to the host tier whose GPU
// slots a request waits for. Step returns an Output: the tokens, the
// completions, rejections, lifecycle events and KV events of the pass, its
// modeled duration and the worker's metrics after it. Everything in it is
// stamped in modeled time; tokens carry the end of the pass that produced
// them, which is also the worker's next wake-up. When NextWake reports
// nothing runnable the driver parks until the next input: a worker whose
// only state is held KV does no work at all.
//
// A pass decides everything it produces when it starts: which requests get
// a token, which complete, which begin to hold. An input that targets a
// request (ReleaseHeld, Cancel, StartTransfer, Activate, CancelDestination,
// DestinationReady) while a pass is in flight therefore takes effect at the pass's End
// (Worker.InputAt), with its events stamped then and its result describing
// the state then: a request the pass completes is unknown to a Cancel, one
// it runs still gets its token, stamped at the same instant as the
// cancellation, and a hold the pass starts can be ended, but only after it
// started. Every request's history is in time order. Submit and Reserve
// take effect at once; a new request waits for the next pass either way.
// StartTransfer on a hold that began before the pass takes effect at once
// too: a held request is in no pass. Activate and CancelDestination keep
// the pass-end rule: an activated request could only join the next pass,
// which starts at that End anyway, and blocks a cancellation frees serve
// only the next pass's admission, so applying them earlier would change
// event stamps and nothing a user measures.
//
// Inputs are typed values (ReleaseHeld, Cancel, StartTransfer, Activate,
// CancelDestination, DestinationReady, and *Submit and *Reserve, which
// carry a whole request and go by pointer) handed to Worker.Apply with
// their modeled time, as raft takes one Step(Message).
// Virtual runs any number of workers on one discrete-event queue: the same
// inputs and seeds give byte-identical outputs, and a run costs only the
// computation. It never reads a clock; the cluster's loop (package
// cluster) paces it against the wall clock when a script needs that, and
// a Ticket holds a place in its queue for a reply that must come back from
// outside (a transfer server's answer), so modeled time never passes a
// step whose reply is pending.
//
// # Two scheduler models
//
// engine_type picks the Scheduler. VLLM models vLLM's block manager: a
// refcounted block pool with an LRU of inactive blocks still usable for
// prefix hits, a token budget per pass shared by chunked prefills and
// decodes, and preemption by recomputation of the newest (or, by
// preemption_mode, oldest) running request when the pool runs dry. SGLang models SGLang's scheduler: a page pool
// under a radix cache whose unlocked leaves are evicted LRU, admission
// against the room left after setting aside each running request's expected
// growth (the new-token ratio, which decays as decodes succeed and resets
// on a retraction), separate extend and decode passes, and retraction of
// the request with the fewest output tokens when a decode cannot grow. Both
// report occupancy in blocks (SGLang's pages), so a cluster treats them
// alike.
//
// engine_type trtllm is the VLLM model under TensorRT-LLM's capacity
// scheduler policy (trtllm.go): under guaranteed_no_evict, admission and
// reservations set aside every request's blocks to its last token and
// nothing is preempted; max_utilization keeps the vLLM rules.
//
// # SGLang model: choices
//
// Where Dynamo's SGLang mocker and SGLang itself differ, or the model had to
// pick a rule, it does the following.
//
//   - KV enters the radix tree a full page at a time as soon as it is
//     computed: a prompt's pages after the pass that prefills them (SGLang's
//     cache_unfinished_req), a chunk's when it is cut, generated pages as
//     decoding fills them. Stored events therefore go out while a request
//     runs, a concurrent request with the same prefix hits it, and a
//     retracted request's pages stay cached (evictable) for its readmission.
//     A generated token's page is taken and stored by the step that
//     computes its KV, one pass after Dynamo's, which takes it when the
//     token is sampled, as dynamo_compat does (fidelity item 11).
//   - The admission budget is the free and evictable room, minus the unused
//     tail of each running request's last page (Dynamo's page overhead),
//     minus the running requests' clipped remaining output times the
//     new-token ratio. A candidate is charged its page-rounded chunk, the
//     evictable cached pages its prefix match locks (they leave the
//     evictable room), and its own clipped output when the chunk completes
//     its prompt; Dynamo does not charge the locked pages (item 12). An
//     idle worker admits its head whenever its pages exist; dynamo_compat
//     charges it like any other, as Dynamo does (item 11).
//   - A prompt longer than the chunk budget is cut to the page-aligned room
//     left in this pass's chunk budget, as SGLang does, not to the whole
//     chunked_prefill_size. The chunk and prefill budgets are charged the
//     tokens computed; dynamo_compat charges whole pages, as Dynamo does
//     (item 11).
//   - A request whose prompt and remaining output need more pages than
//     the pool has is refused on admission (never_fits), since it could
//     never complete. Dynamo, and dynamo_compat, admit what the budget
//     allows (a first chunk) and leave it waiting, holding that, until it
//     is cancelled (item 11).
//   - lpm orders the waiting queue by cached prefix only; SGLang's in-batch
//     deprioritisation of requests sharing a prefix with one already taken
//     is not modeled, though Dynamo models it (item 12). The queue is not ordered at all in a pass where no
//     running slot is free, and each request's match is remembered until
//     the tree changes.
//   - The new-token ratio decays only on decode passes that retracted
//     nobody, as in SGLang; Dynamo decays it every pass, as dynamo_compat
//     does.
//   - An extend pass costs the prefill of its batch plus one decode step
//     over the prompts it completes, which samples their first tokens (as
//     Dynamo times it), so time to first token is prefill plus one step.
//     Running requests decode in the next pass, as in SGLang; Dynamo's
//     step covers them too (item 12).
//     On a prefill worker only the prefill is charged, as for vLLM.
//   - Retraction takes the running request with the fewest output tokens,
//     the longer prompt among equals (SGLang's tie-break), or a request mid
//     chunked prefill; EventPreempted counts the pages it stopped using,
//     not shared prefix pages another request still locks.
//   - The last running request is retracted only while an activated
//     destination waits for its running slot (its KV is in place, so it
//     can run in the room freed). Dynamo retracts only running requests,
//     the first among equals, and never the last one (item 12).
//   - After a retraction the new-token ratio resets to its initial value;
//     dynamo_compat re-estimates it as Dynamo main does.
//   - Metrics.Waiting counts queued requests, bootstrap ones,
//     destinations still waiting for their reservation and activated ones
//     waiting for a slot, but not reserved destinations awaiting Activate,
//     which ReservedRequests reports (in both models); DynamoWaiting adds
//     them, as Dynamo's waiting_requests does, and under dynamo_compat
//     Waiting reports that figure.
//
// # Fidelity with Dynamo
//
// Where mocker's results can differ from Dynamo main's, what each does, and
// the switches that reproduce Dynamo's numbers (dynamo_compat, for the
// engine and for the router) are listed in one place: docs/fidelity.md.
// Its items, by number: (1) decode utilisation clamped at 1; (2) exact
// mean prompt length for the timing model; (3) SGLang's new-token ratio
// after a retraction, its decay, and queue priority; (4) destination
// reservations: waiting_requests and which waiting vLLM request runs
// next; (5) engine arguments Dynamo models and mocker rejects, requests
// for no token, planned output tokens; (6) the
// router's kv tie-break; (7) the indexer; (8) held KV in the router's
// load; (9) busy data-parallel ranks; (10) tokens generated on a prefill
// worker; (11) SGLang: when a sampled token takes its KV, requests that
// can never complete, page-charged budgets; (12) SGLang: retraction
// choice, lpm among shared prefixes, admission budget details, a
// destination's output count; (13) Dynamo's mocker unit tests, replayed;
// (14) TRT-LLM; (15) KV offload tiers. dynamo_compat gives Dynamo's
// numbers for 1–3, 10, 11 and item 4's waiting count;
// router_load_includes_held for 8; the router's dynamo_compat for 6.
//
// # KV offload tiers
//
// A vLLM or TRT-LLM worker with num_g2_blocks has a host tier (KVBM's G2)
// that takes the blocks its prefix cache evicts; num_g3_blocks adds a disk
// tier (G3) and enable_g4_storage object storage (G4) below it, each
// taking a copy of every block the host tier takes in from the GPU pool.
// A request scheduled with nothing computed onboards the run of its
// prompt's blocks past its GPU hits that the tiers hold (host, then disk,
// then object storage), staging the lower tiers' blocks through the host
// tier, and its pass is charged the copies at the tiers' bandwidths. An
// evicted block reaches the host tier when its offload batch lands
// (offload_batch_size blocks a batch, the batches under way sharing
// bandwidth_g1_to_g2_gbps), and on to disk or object storage when its
// copy from the host tier lands (bandwidth_g2_to_g3_gbps,
// bandwidth_g2_to_g4_gbps); the passes are not slowed by them. Until its
// batch lands, the block keeps its GPU slot: an allocation that evicts
// it stops short, its request waits, and the worker wakes at the landing
// (NextWake). Each
// worker has its own tiers; docs/fidelity.md, item 15, says where that
// differs from Dynamo.
// KV events name the tier each block is in (kv.Medium).
//
// # Modeled time and wall time
//
// All times are modeled milliseconds on the engine's timeline: pass lengths
// come from a perf.Model, and nothing the core reports is scaled by
// speedup_ratio. A decode step is floored at 1 ms by the model first and
// then divided by decode_speedup_ratio, as in Dynamo, so speculative
// decoding can step in under 1 ms. The engine never reads the wall clock
// and never sees speedup_ratio's pacing: the cluster's loop turns modeled
// time into wall time for the whole cluster at once (see package cluster).
//
// # Output tokens and the cost of a pass
//
// A generated token id is a function of the worker's seed, the request's
// id and the token's index, in [1000, 2000): a request's tokens do not
// depend on which requests share its passes, and a token no Output reports
// is stored only when a block hash reads it.
//
// A pass costs the requests it has work for, not every running one. On a
// vLLM decode or aggregated worker with chunked prefill on (the default)
// whose Outputs report first tokens only (as a cluster's do), a running
// request whose next passes are plain decode steps (no block to take or
// to store, not its last token) coasts through them untouched: the pass
// counts it in its decode batch from sums the worker keeps, and it runs
// as itself again in the first pass that is not plain for it. A request
// that waits for blocks (admission, or a destination's reservation) is
// walked through the prefix cache again only once as many blocks were
// released as it lacked beyond those allocated, or a block of its prompt
// stored, since it last lacked them; and, either way, only once the walk
// could go past the block where it last stopped or as many blocks are free
// as it needs beyond the hits it had. Neither changes a result: tests
// run workers with and without them side by side and compare every
// Output.
//
// # Extents: the cost of long prompts
//
// The pool keeps one entry per 16-token block, so a trace's 512-token
// hash block is 32 entries, and a Mooncake-shaped prompt (8k tokens) some
// 500 that each walk, allocation, store, hold and release reads one by
// one. The design that removes this keeps a trace block's run of blocks
// as one extent: a range of slots with one index and LRU entry, matched
// whole by its first block's sequence hash and the run's local hash
// (sequence hashes chain, so the rest follow); references and holds per
// extent, split where a hit or a hold ends inside one; eviction from an
// extent's tail, which keeps today's tail-first LRU order; per-block
// hashes only where KV events name them; and prompts kept as their hash
// runs and a tail rather than copies of their tokens.
//
// Its first step is in: KVView's depth walks, which a router makes for
// every prompt on every prefill worker, jump along a run 32 blocks at a
// time where an earlier walk went (jumpTable; a jump holds while its two
// blocks are unevicted and no run was cut in its middle since). Jumps
// made by stores as well, so that a conversation's new turn jumps on its
// first walk, cost more than they saved: a store read its run again to
// make them, and most prompts' own blocks are never walked.
// The second is in too: a request whose Hashes cover its complete blocks
// may leave their tokens out (Request.Skip), since a worker given a
// block's hash never reads its tokens; a cluster keeps only the tokens
// after them, the last partial block, rather than a 32 KB copy of each
// Mooncake-shaped prompt for as long as the request lives. That took
// about an eighth of `mocker replay`'s CPU on long prompts (the copy into
// cold memory, and the page faults of the memory the copies held) and a
// fifth of its peak RSS (docs/replay.md gives the figures).
//
// Prefix walks still read every block, as they hand each to the request;
// so do allocation, store, hold and release. On the long-prompt replay
// they are now about half of the process's CPU (prefix walks 15%,
// allocation 9%, releases and ended holds 11%, stores 6%, the router's
// depth walks 7%), and the replay's hashing of each prompt's blocks 10%:
// those are what the extents are to take next. Most of a walk's cost is
// its first touch of each block (a cache miss in a pool of thousands):
// walks spared over blocks a walk just read save little, so the gain is
// in reading fewer, denser entries.
//
// # Two views of occupancy
//
// The capacity view counts every allocated block, held ones included; it is
// what admission and preemption use, since a held block occupies memory as
// surely as a running one. The router-facing view (Metrics.RouterActiveBlocks)
// leaves out blocks referenced only by holds unless
// Args.RouterLoadIncludesHeld is set. Always ActiveBlocks + InactiveBlocks +
// FreeBlocks == TotalBlocks.
//
// # The Hold policy
//
// A request submitted with Hold is the source side of a disaggregated
// handoff. When it finishes (after its first token on a prefill worker,
// or, under dynamo_compat, its MaxTokens) its
// running slot is freed but its blocks stay allocated: they fill the pool,
// count against admission and can make later prefills wait or be rejected.
// An EventHoldStarted marks the moment; ReleaseHeld ends the hold with an
// Outcome (Transferred or Aborted), emits EventHoldReleased with the hold's
// duration, and returns the blocks to the inactive pool where they still
// serve prefix hits. ReleaseHeld is idempotent. Requests submitted with
// Release never hold.
//
// # The handoff lifecycle
//
// A disaggregated request crosses two workers, in one of two orders.
//
// Source-first (vLLM, and SGLang with sglang.optimistic_prefill): the
// prefill runs and holds before the decode side is involved; the decode
// reserves later and claims the hold with StartTransfer. A decode that
// cannot reserve in time leaves the prefill's KV stranded until the abort
// timeout, which is the failure this package exists to reproduce.
//
// Destination-first (SGLang's default): a Hold request submitted to an
// SGLang prefill worker waits in a bootstrap queue, computing and holding
// nothing, until the decode side has reserved and the caller says so with
// DestinationReady. Only then does the prefill run, and its transfer starts
// the moment its KV is held: EventTransferStart follows EventHoldStarted in
// the same Output, and the caller does not call StartTransfer. The hold
// therefore lasts the modeled transfer and no longer, whatever the decode
// load; a saturated decode side makes requests wait before the prefill
// instead of stranding KV after it. A bootstrap request whose decode never
// becomes ready is dropped after handoff_session_timeout_ms with a
// RejectHandoffTimeout rejection.
//
// The source-first lifecycle:
//
//	prefill (source)
//	  Submit(Hold) ─▶ waiting ─▶ running ─prefill done─▶ SourceHeld ──StartTransfer──▶ Transferring
//	                                                         │                             │ transfer delay
//	                                                         │ abort / session deadline    ▼
//	                                                         └──────────▶ Aborted      Transferred
//	                                                                     (pin_end)     (pin_end)
//	decode (destination)
//	  Reserve ─▶ WaitingForRemoteKV ─admission─▶ DestinationReserved ─Activate─▶ running ─▶ completed
//	                      │                              │
//	                      └──────── CancelDestination ───┴─▶ cancelled (blocks freed)
//
// Every arrow is an Event, stamped in modeled time with the request id:
// prefill_kv_pin_start (EventHoldStarted), transfer_start,
// prefill_kv_pin_end with its outcome, reason and duration
// (EventHoldReleased), decode_kv_wait_start, decode_kv_reserved (with
// MissingTokens and the wait), decode_kv_activated and decode_kv_cancelled.
//
// Where mocker and Dynamo differ, and how to get Dynamo's numbers (the
// dynamo_compat argument), is listed in docs/fidelity.md.
//
// The abort clock starts at the SourceHeld moment, never at submit: the
// hold's deadline is the earlier of kv_transfer_abort_timeout_ms (when set)
// and handoff_session_timeout_ms after it, so without an abort timeout the
// session timeout still reclaims the KV. StartTransfer drops that deadline
// and schedules the release for when the modeled transfer completes
// (tokens × kv_bytes_per_token / kv_transfer_bandwidth); only then is the
// source's KV freed. Which tokens are charged is the caller's choice, made
// with TransferTokens: the whole prompt, or the MissingTokens the
// reservation reported.
//
// The destination is admitted by its own scheduler as a reservation of
// blocks for the whole prompt (resident prefix blocks reused), and, as in
// Dynamo and vLLM, of KV only: it keeps no max_num_seqs slot. A vLLM
// destination is reserved as soon as the blocks and a free running slot
// exist (the slot is not kept), on arrival or at the change that frees
// them (a hold released, a cancellation, a pass's end), stamped then, and
// fresh requests are not admitted while one waits; an SGLang destination is reserved by its passes' admission,
// within their page budget. There is no destination timer; a reservation
// waits until Activate or CancelDestination, because the source's
// deadlines are authoritative. Activate makes it a request whose prompt is
// computed and whose token 0 came from the prefill; it waits for a running
// slot, ahead of the waiting queue, and then decodes tokens 1 to MaxTokens-1,
// stopping at max_model_len exactly where the same request served
// aggregated would. The destination keeps a placeholder id (0) for that
// first token, whose real id only the prefill side knows; the placeholder
// never reaches a router, because decode workers publish no KV events. A
// destination refused by admission gets a Rejection and an
// EventDestinationCancelled, so every decode_kv_wait_start is closed.
//
// Deadlines are modeled time. A Worker applies every deadline due by the
// time an input takes effect before the input, and every deadline due by
// `now` before a pass, so an input sees them all (a StartTransfer after the
// abort deadline gets ok=false), and the events of inputs and deadlines
// leave Step in time order with their own times. The Virtual driver steps a
// worker exactly at each deadline, even inside a pass, so a worker holding
// only KV costs one wake-up per deadline and none without one. It delivers
// the events that precede a pass at once and the pass's Output at its End.
//
// # Length limits
//
// A fresh request is refused (a Rejection, no token) when its prompt
// reaches max_model_len, needs more blocks than the pool has (on an SGLang
// worker, with its output; under dynamo_compat, not at all, fidelity item
// 11), or, with
// chunked prefill off, has more uncached prompt tokens than one pass's
// budget. A request that has already streamed tokens is never refused: if a
// preemption leaves it longer than the whole pool can hold, it completes
// with what it streamed and Completion.Truncated set, as it does when it
// reaches max_model_len. With chunked prefill off only the prompt must fit
// one pass; the generated tokens a preempted request recomputes are
// chunked, and they are not prompt work for the prefill timing model.
package engine
