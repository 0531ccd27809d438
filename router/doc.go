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
//	overlap        = leading request blocks w holds, from the radix index
//	prefill_blocks = (pending_prefill_tokens(w) + max(isl − overlap·bs, 0)) / bs
//	decode_blocks  = active_blocks(w) + request blocks not already active on w
//	cost           = overlap_score_weight · prefill_blocks + decode_blocks
//
// Lower wins. pending_prefill_tokens and active_blocks are the router's own
// prediction, updated as it routes: a routed request charges its uncached
// prompt tokens until PrefillDone (first token) and its blocks until Free,
// with blocks refcounted by sequence hash so requests sharing a prefix on a
// worker share blocks. At router_temperature 0 the minimum cost wins, ties
// going to the worker with fewer indexed blocks and then to a uniform draw;
// above 0 a worker is sampled with probability proportional to
// exp(−(cost − min)/((max − min)·temperature)).
//
// The index is fed by the workers' KV events (Router implements kv.Sink).
// With use_kv_events off, the router instead records each routed prompt as
// cached on the chosen worker for router_ttl_secs (approximate mode).
//
// # Disaggregated requests
//
// RouteDisagg picks a prefill worker by the mode (in kv mode, by prefix
// overlap and pending prefill), then a decode worker by the same mode with
// the overlap weight at 0 and no block sharing: in kv mode the decode choice
// is effectively the fewest active blocks.
//
// # Load and busy workers
//
// Workers' own reports (UpdateLoad; Router implements LoadSink) serve busy
// detection and least-loaded tie-breaks only. A worker is busy while its
// reported router-facing active blocks or its predicted active blocks exceed
// active_decode_blocks_threshold × total blocks, or while its pending
// prefill tokens exceed active_prefill_tokens_threshold. Both are off by
// default.
//
// All randomness comes from one generator seeded by Config.Seed, so the same
// inputs in the same order give the same choices.
package router
