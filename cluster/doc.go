// Package cluster assembles mock workers, a router and the prefill workers'
// KV-transfer servers into one in-process cluster, and runs requests through
// it end to end, disaggregated handoff included. It is what a load script's
// mocker.cluster({...}) builds.
//
// # Shape
//
// Every worker is an engine.Worker, named by pool and index ("worker-0"
// aggregated, "prefill-0", "decode-1"); a worker with dp_size n is n of
// them, its data-parallel ranks, each its own scheduler, KV pool, router
// target and KV event stream (events carry the rank), under the worker's
// one name and, for a prefill, its one transfer server. Results, holds,
// events and stats name the rank beside the worker (prefill_dp_rank,
// decode_dp_rank, dp_rank). One goroutine, the cluster's loop,
// owns them all, the router's view of them and every request's handoff
// machine (package handoff), on one discrete-event queue in modeled time
// (engine.Virtual). The router reads each worker's prefix cache through
// the worker's engine.KVView: what its KV events would have put in the
// router's index, those of a pass still in flight excepted, without
// replaying them block by block. Generate and the other methods talk to the loop through
// its mailbox. Every prefill worker has a bootstrap.Server on TransferHost
// (loopback by default, any free port), and the decode side of a handoff
// really connects to it over TCP, through one kept-alive connection per
// prefill server. RunVirtual runs the same loop on virtual time with the
// transfer protocol in memory (or, on request, over the same sockets).
//
// # Defaults
//
// New(Config{}) runs two aggregated vLLM workers behind a round-robin
// router. A disaggregated cluster (Disagg, or prefill/decode given in a
// script) defaults to one prefill and one decode worker. Engine arguments
// start from laptop-sized defaults — block_size 16, num_gpu_blocks 1024,
// speedup_ratio 10 — under the cluster's args, under each pool's args; the
// cluster sets engine_type from Engine and worker_type from the pool, and an
// engine_type or worker_type in args that says otherwise is an error, as is
// an sglang object when the engine is vllm. Every pool must share
// block_size (one router compares block hashes) and speedup_ratio (one
// modeled clock). An explicit block_size 0 does not mean the laptop default
// 16: it means the engine's own default, 64 for vLLM, 32 for TRT-LLM and
// page_size for SGLang, as in Dynamo.
//
// # The handoff
//
// The lifecycle is package handoff's state machine; the loop carries out
// its actions. vLLM is source-first: the router picks a prefill and a decode worker; the
// prefill computes the prompt and the first token and holds the KV
// (prefill_kv_pin_start; its abort clock starts now); the cluster opens a
// transfer room under a fresh transfer id and hands the decode side the
// vLLM params {transfer_id, prefill_host, prefill_port, transfer_token}. The
// decode worker reserves blocks through its own scheduler
// (decode_kv_wait_start, then decode_kv_reserved), then connects to the
// prefill's transfer server. The connection starts the modeled transfer on
// the prefill (transfer_start), whose end releases the hold as transferred
// (prefill_kv_pin_end); the server answers ACK, the decode activates the
// request and generates the remaining tokens. If the prefill's
// kv_transfer_abort_timeout_ms (or handoff_session_timeout_ms) passes first,
// the hold ends as aborted, the server answers ABORT to the decode whenever
// it connects, the decode frees its reservation and the request ends
// "aborted". A hold given up because the request was refused (a decode
// that can never fit it), withdrawn or cut short ends "cancelled", counted
// apart from deadline aborts.
//
// SGLang is destination-first: the request reaches both workers at once;
// the prefill waits in its bootstrap queue, computing and holding nothing,
// while the decode worker reserves (decode_kv_wait_start,
// decode_kv_reserved); the reservation tells the prefill its destination is
// ready (engine.DestinationReady), so it leaves its bootstrap queue
// and computes. If the decode cannot reserve within
// handoff_session_timeout_ms, the prefill is dropped from its bootstrap
// queue, the pending reservation is withdrawn and the request ends
// "rejected" with a "handoff timeout" reason. Its transfer starts the
// moment its KV is held (prefill_kv_pin_start and transfer_start at the same
// modeled instant; the engine starts it, not the decode's connection), and
// the hold lasts the modeled transfer: a saturated decode pool makes
// requests wait for a reservation before any KV exists, instead of
// stranding held KV until it aborts. The decode reads SGLang's params
// {bootstrap_host, bootstrap_port, bootstrap_room, bootstrap_token}, waits at the transfer
// server for ACK, activates and decodes. With sglang.optimistic_prefill the
// prefill computes at once and the handoff runs source-first, stranding and
// aborting like vLLM's.
//
// A caller that picks workers itself drives a request's two halves apart,
// as vLLM's P/D over HTTP does: Prefill runs the prompt on a prefill rank
// of its choice and returns, once the KV is held, the transfer's params
// (a Handout: transfer server host and port, transfer id, token); Decode
// presents them (a Claim) on a decode rank of its choice, which reserves,
// connects with the claim's token and generates. Both halves are one
// request on one handoff machine (handoff.Spec.DecodeLater), so a hold no
// Decode claims aborts at its deadline like any other; a claim that names
// no held transfer, a spent or expired one, a wrong token or another
// prompt is refused (*ClaimError) before anything is applied. GenerateOn
// runs a whole request on an aggregated rank of the caller's choice.
//
// Whatever the path, a Result whose prefill held KV is returned only once
// the hold's end is known, so HoldOutcome and HoldMs are always final. A
// completion cut short by a length limit (the sequence outgrew the decode's
// KV pool, or reached max_model_len) stays "completed" with Truncated set
// and Error naming the limit.
//
// # Modeled time and wall time
//
// Every time a Result, an event or Stats reports is modeled time. New's
// loop is paced against the wall clock: it processes the events of modeled
// time t once the wall clock reaches t / speedup_ratio since New (the
// relation and its rounding are internal/timescale's Scale, the pacing its
// Pacer, which the harness's paced clock and the distributed worker use
// too). A request
// from Generate arrives at the loop's modeled now: the wall clock's modeled
// time while the loop keeps up, never a time the loop has already passed.
// Every later step of a request is an event on the same queue, so no
// worker ever sees another's output late: when the host cannot keep up,
// the whole cluster runs late together, modeled results do not change, and
// the lag is measured (ClockLag, Lag). A handoff step whose reply must come
// back through a socket (the transfer server seeing the decode, its ACK or
// ABORT) holds a ticket in the queue at the step's modeled time: the loop
// does not pass it until the reply is in, so socket latency never becomes
// modeled time and never decides an abort. The same arrivals at the same
// modeled times therefore give the same results paced at any speedup, with
// the CPU busy or not, as on virtual time (RunVirtual). The router's TTLs
// (router_ttl_secs, router_request_ttl_secs) are modeled seconds too. What
// the wall clock still decides is the offered load: a script's durations,
// rates and sleeps are wall time, so the arrivals they produce depend on
// how fast the script runs. GenerateThenPause takes the caller's own
// time out of it for closed loops: modeled time stands still from a result
// until the caller's next request (or Resume).
//
// NewStepped builds the same cluster without a goroutine or a wall clock,
// for an outside clock to drive (the harness's paced or virtual clock, under
// `mocker run` and `mocker run --clock virtual`; New's own pacing serves
// `--clock wall` and Go callers): Submit hands in a request keyed by caller and call
// order, Settle brings the loop to a modeled time (requests handed in at
// one instant apply in key order, never in goroutine order) and Next says
// when it next needs the clock.
//
// # Capacity refusals
//
// Held KV fills prefill pools; later prefills then queue in the engine. With
// a busy threshold (see RouterOptionsHelp) the router refuses them instead:
// the request ends "rejected" with PrefillRejected and "all prefill workers
// busy" (a saturated decode pool: "all decode workers busy", without
// PrefillRejected), the pool named by the router's refusal itself. Engine
// refusals (a prompt that never fits, or is too long) end "rejected" with
// the engine's reason.
//
// # Forensics
//
// Every handoff transition is one slog record on Config.Logger (message =
// event name; attributes t_ms, request_id, transfer_id, prefill_worker,
// decode_worker, and outcome, duration_ms, blocks, missing_tokens, wait_ms
// where they apply) and an Event kept in a bounded ring (Events). Holds and
// HoldGraph rebuild the stranding graph in bounded memory.
//
// # Workers in other processes
//
// The loop reaches each worker through a WorkerHandle. With
// Config.Transport set, New runs no engine worker itself: a Transport
// (package distributed, registered with RegisterTransport) joins remote
// workers through a RemoteHost as it discovers them, and posts what they
// report (pass outputs, input replies, transfer-room answers) into the
// loop, which feeds the same handoff machines, router and stats. Remote
// replies take no ticket in the event queue (each worker paces its own
// clock), their times are mapped onto the cluster's, and a lost worker
// leaves the router and indexer and ends its requests naming it.
//
// # Invariants
//
// CheckInvariants, called after Drain, checks docs/design.md §6: block conservation
// per worker (per rank), request conservation, holds and transfers accounted for, no
// KV held, reserved or active once drained, and causality per request.
package cluster
