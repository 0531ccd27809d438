// Package router places LLM requests on mock workers the way NVIDIA Dynamo's
// frontend does, so a simulated cluster meets the same routing decisions, and
// the same overload behaviour, as a real one.
//
// # Modes
//
//   - round-robin: the free workers in turn (registration order).
//   - random: a uniform draw among the free workers.
//   - least-loaded: the fewest requests in flight from this router, then
//     the fewest router-facing active blocks the worker reported; remaining
//     ties are a uniform draw.
//   - power-of-two: two distinct free workers drawn at random; the one with
//     fewer requests in flight wins, the first drawn on a tie.
//   - kv: the cheapest worker under Dynamo's classic cost (below).
//
// "Free" excludes workers over a busy threshold. When a role has workers but
// none is free, routing fails with a *BusyError naming the role ("all
// prefill workers busy", "all decode workers busy", or "all workers busy"
// for aggregated workers), which matches ErrAllBusy and which a frontend
// turns into HTTP 503.
//
// # The kv cost
//
// For each free worker w and a request of isl prompt tokens in n blocks of
// size bs:
//
//	overlap        = leading request blocks w holds, from the radix index,
//	                 + host_cache_hit_weight × the blocks w's host tier holds next
//	                 + disk_cache_hit_weight × those its disk and object tiers hold after
//	prefill_blocks = (pending_prefill_tokens(w) + max(isl − overlap·bs, 0)) / bs
//	decode_blocks  = active_blocks(w) + request blocks not already active on w
//	cost           = overlap_score_weight · prefill_blocks + decode_blocks
//
// The tier terms are Dynamo's weighting of a prefix hit by the tier holding
// it (0.75 for the host tier, 0.25 for disk and object storage, by
// default): the index keeps each worker's tier blocks from the KV events
// of those media (kv.MediumCPU and below) and continues a worker's GPU
// prefix into its host tier, then its disk tier, then object storage, one
// run each. Without tier events they are 0 and the cost is the classic one.
//
// Lower wins. pending_prefill_tokens and active_blocks are the router's own
// prediction, updated as it routes: a routed request charges its uncached
// prompt tokens until PrefillDoneLease (first token) and its blocks until
// FreeLease, with blocks refcounted by sequence hash so requests sharing a
// prefix on a worker share blocks. (RouteLease and RouteDisaggLease track a
// request by the Lease they return, so PrefillDoneLease and FreeLease need
// no lookup.) At
// router_temperature 0 the minimum cost wins, ties going to the worker
// with fewer indexed blocks and then to a uniform draw;
// above 0 a worker is sampled with probability proportional to
// exp(−(cost − min)/((max − min)·temperature)).
// decode_active_request_weight (default 0) adds that many cost units per
// request in flight. With dynamo_compat the cost is Dynamo main's,
// prefill_load_scale × max((pending + isl)/bs − overlap, 0) + decode_blocks
// + the request weight (the same numbers at default settings), and ties are
// a uniform draw; docs/fidelity.md lists what differs and why.
//
// The index is fed by the workers' KV events (Router implements kv.Sink).
// A worker whose cache the router can read at the moment of a decision may
// instead offer a KVView (SetKVView), which answers for it exactly as the
// index would with every event it sent so far applied: an in-process
// cluster's workers do, and save the index's per-block work on every store
// and eviction.
// With use_kv_events off, the router instead records each routed prompt as
// cached on the chosen worker for router_ttl_secs (approximate mode); past
// router_max_tree_size blocks it prunes the oldest down to
// router_prune_target_ratio (0.8) of that bound.
//
// # The index, and where it differs from Dynamo
//
// Events from a worker not registered yet are applied: under a distributed
// transport a worker's first events can overtake its discovery record. The
// worker is routable only from AddWorker on, and its cache then counts at
// once. Events from a worker RemoveWorker took out are dropped until
// AddWorker registers the id again, so events still in flight when a worker
// dies cannot resurrect it in the index.
//
// A Removed event for a block no worker holds any more keeps the block's
// children, where Dynamo's tree drops the subtree. The index's per-worker
// maps point straight at tree nodes, and workers (or other keys of the same
// worker) may still hold blocks below the removed one: dropping the subtree
// would leave those entries pointing at recycled nodes, or cost a walk of
// the subtree on every removal. Routing is unaffected, since a prefix match
// stops at the first block a worker lacks; an emptied node costs memory
// only until its last descendant goes, and a later Stored of the same block
// under the same parent reconnects the whole prefix.
//
// # Data-parallel ranks
//
// A worker with data_parallel_size n is n routing targets, one per
// (worker, rank) pair, each registered with its own ID and
// WorkerInfo.DPRank. Everything Dynamo keeps per (worker, dp_rank) is
// therefore per target here: the index's blocks, the predicted load, the
// in-flight count, the busy check, and the choice itself, made among all
// ranks of all free workers as Dynamo's selector does. A transport that
// carries Dynamo's (worker_id, dp_rank) maps each pair to its target ID
// before calling KVEvent or UpdateLoad; an event's dp_rank is then used
// only to detect gaps in its event ids, per rank.
//
// Where this differs from Dynamo: Dynamo takes a worker out of rotation
// only when all its ranks are busy; here each busy rank leaves rotation on
// its own, so a worker with one saturated rank still receives requests on
// its others, and a request is refused only when every rank of the pool is
// busy.
//
// # Disaggregated requests
//
// RouteDisagg picks a prefill worker by the mode (in kv mode, by prefix
// overlap and pending prefill), then a decode worker by the same mode with
// the overlap weight at 0 and no block sharing: in kv mode the decode choice
// is effectively the fewest active blocks.
//
// Both pools are checked for a free worker before either is picked, so a
// request the decode pool refuses leaves the prefill side untouched: no
// load charged, no round-robin turn taken, no random draw spent. The decode
// pick does not walk the index.
//
// # Load and busy workers
//
// Workers' own reports (UpdateLoad; Router implements LoadSink) serve busy
// detection and least-loaded tie-breaks only. A worker is busy while any
// configured threshold is exceeded, all off by default:
//
//   - active_decode_blocks_threshold: its reported router-facing active
//     blocks or its predicted active blocks (either one) exceed the fraction
//     of its total blocks;
//   - active_prefill_tokens_threshold: its pending prefill tokens exceed
//     the count;
//   - active_prefill_tokens_threshold_frac: its pending prefill tokens
//     exceed the fraction of its max_num_batched_tokens
//     (WorkerInfo.MaxBatchedTokens; 10M when unknown, as in Dynamo).
//
// Busy is decided afresh at every decision from the current values, with
// no latch: a worker is free again as soon as every value is back at or
// under its limit.
//
// A request whose Free never comes (a lost stream) stops counting
// router_request_ttl_secs (300 s, as in Dynamo) after it was routed; the
// check runs at each routing decision on the router's clock (WithClock),
// and each expiry is counted in Stats and logged.
//
// The router reads its clock and writes its logs outside its mutex, so
// both may take locks of their own; neither may call back into the router.
//
// All randomness comes from one generator seeded by Config.Seed, so the same
// inputs in the same order give the same choices.
package router
