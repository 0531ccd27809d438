// Package xk6mocker is the JavaScript module "k6/x/mocker": the bridge
// between the load harness and mocker's in-process clusters of mock prefill,
// decode and aggregated workers. Importing the package (the mocker binary
// does so) registers the module and a "KV handoff" section of the
// end-of-test summary.
//
//	import mocker from 'k6/x/mocker';
//
//	const cluster = mocker.cluster({ engine: 'vllm', router: 'kv',
//	  prefill: { workers: 2 }, decode: { workers: 2, args: { max_num_seqs: 8 } },
//	  args: { kv_transfer_abort_timeout_ms: 2000 } });
//
//	export default function () {
//	  const r = cluster.generate({ prompt_tokens: 1024, max_tokens: 64 });
//	}
//	export function teardown() { cluster.drain(30000); }
//
// # Clusters
//
// mocker.cluster(config) takes the object of cluster.ConfigFromMap (every
// key is optional) and returns a handle. Clusters are keyed by name
// (default "default") for the length of one test run: every VU that asks for
// a name gets the same cluster, so the init code that each VU runs creates
// it once; asking again with a different config for the same name is an
// error. The run's clusters are closed when the run ends, after teardown
// and the summary. A config the cluster cannot build throws an Error whose
// message starts with "mocker.cluster:" and names the field, e.g.
// "mocker.cluster: prefill.args.num_gpu_blocks: want an integer ≥ 1, got -1".
//
// The handle has:
//
//	generate(req)       blocks the VU until the request ends; returns its result
//	generateAsync(req)  the same as a Promise, settled on the VU's event loop
//	stats()             occupancy and counters now
//	drain(timeoutMs)    waits (default 30000 ms) for in-flight work, holds
//	                    included, to end; returns stats() plus drained (bool)
//	                    and, when the wait timed out, error
//	holds()             the stranding graph: the open holds and a bounded
//	                    set of the longest and latest ended ones
//	name                the cluster's name
//
// # Requests and results
//
// A request is {prompt_tokens, max_tokens = 16, prefix, prefix_tokens,
// tokens}. Mistakes in the request object itself — an unknown key, a value
// of the wrong type, a missing prompt_tokens, a count below its minimum,
// prefix_tokens beyond prompt_tokens — throw an Error naming the field
// (generateAsync rejects its Promise with it), since they are script bugs
// that no load level would fix. A well-formed request the cluster cannot
// serve (every prefill worker busy, a prompt longer than the model or the
// pool) is not an exception: it comes back with outcome "rejected" and the
// reason in error, and counts in the metrics like any other outcome.
//
// The result has the snake_case fields outcome ("completed", "aborted",
// "rejected", "error"), error (null when completed), ttft_ms, itl_ms,
// e2e_ms, pin_ms, transfer_ms, decode_wait_ms (modeled milliseconds, 0 when
// not applicable), output_tokens, cached_tokens, prefill_worker,
// decode_worker, transfer_id (0 for aggregated requests, whose
// prefill_worker and decode_worker both name the one worker), and also
// pinned, pin_outcome ("transferred", "aborted" or "") and prefill_rejected.
//
// # Metrics
//
// Every metric is registered when the module is imported, so thresholds may
// name them before any sample exists. Each request emits, with the tags
// engine and router plus those listed:
//
//	mocker_requests              Counter       one per request; outcome
//	mocker_request_failed        Rate          outcome other than completed
//	mocker_ttft                  Trend (time)  when a first token came; outcome
//	mocker_itl                   Trend (time)  when two or more tokens came; outcome
//	mocker_e2e                   Trend (time)  completed requests; outcome
//	mocker_kv_pins               Counter       a prefill KV hold started; role=prefill
//	mocker_kv_pin_duration       Trend (time)  when the hold ended; role=prefill, outcome=transferred|aborted
//	mocker_kv_aborts             Counter       a hold ended by abort timeout; role=prefill
//	mocker_kv_transfer_duration  Trend (time)  transferred holds
//	mocker_decode_wait           Trend (time)  decode arrival to its reservation; role=decode
//	mocker_prefill_rejections    Counter       refused because every prefill worker was busy; role=prefill
//	mocker_kv_held_blocks        Gauge         cluster-wide held blocks
//
// Note that outcome on mocker_kv_pin_duration is the hold's outcome, so
// 'mocker_kv_pin_duration{outcome:aborted}' selects the aborted holds.
// mocker_kv_held_blocks is sampled after every request and, while a VU
// waits in generate, every 250 ms of wall time.
package xk6mocker
