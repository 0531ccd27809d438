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
// it once. The config is checked first, so a bad field is reported as such
// whatever runs under the name; a valid but different config under a name
// in use is an error saying which key differs and suggesting another name:
// `mocker.cluster: name: cluster "default" already exists with another
// config: seed 1 vs 2 (existing vs this one); …`. The run's clusters are
// closed when the run ends, after teardown and the summary. A config the
// cluster cannot build throws an Error whose message starts with
// "mocker.cluster:" and names the field, e.g.
// "mocker.cluster: prefill.args.num_gpu_blocks: must be at least 1, got -1".
//
// The handle has the members below. generate, generateAsync, stats, drain
// and sleep refuse the init context, as k6 modules refuse I/O there:
// calling one in top-level code fails the test with exit 107.
//
//	generate(req)       blocks the VU until the request ends; returns its result
//	generateAsync(req)  the same as a Promise, settled on the VU's event loop
//	stats()             occupancy and counters now; workers lists one
//	                    entry per data-parallel rank (name, dp_rank, …)
//	drain(timeoutMs)    waits up to timeoutMs of wall time (default 30000) for
//	                    in-flight work, holds included, to end; returns
//	                    stats() plus drained (bool) and, when it gave up,
//	                    error ("drain: 40 requests still in flight (…) after
//	                    waiting 1ms (wall time); …")
//	sleep(ms)           blocks the VU for ms of modeled time: ms /
//	                    speedup_ratio of wall time
//	holds()             the stranding graph: the open holds and a bounded
//	                    set of the longest and latest ended ones
//	name                the cluster's name
//	speedup_ratio       modeled ms per wall ms
//
// # Traces
//
// mocker.trace(data, options) reads a request trace — Mooncake JSONL,
// sessions or CSV, gzip too, the formats of `mocker replay` — from what
// open() returned in the init context; options are block_size,
// rate_scale, max_requests and duration_ms. It reads the whole trace once,
// so a bad row throws naming its line and field, and its requests property
// counts what play sends. trace.play(cluster, onResult) sends the trace's
// requests at their modeled arrival times (the replay package's schedule,
// handed to the cluster ahead of time with SubmitAt, so they arrive
// exactly then) and blocks until all have ended, each counted in the
// metrics as generate's are; it needs the run's clock (virtual or paced).
// scripts/replay.js and docs/replay.md show it.
//
// # Wall time and modeled time
//
// The cluster's clock runs speedup_ratio times faster than the script's.
// Everything the cluster reports is modeled time: the result's *_ms
// fields, the time metrics, kv_transfer_abort_timeout_ms, the summary
// section. Everything that paces the script is script time: scenario
// durations and arrival rates, k6's sleep(), iteration_duration, drain's
// timeout. Script time is the run's clock: paced (mocker run's default)
// or virtual, the in-process cluster joins it as a participant and its
// modeled time is the clock's × speedup_ratio exactly; on --clock wall
// the cluster paces its own loop against the wall clock. A request's modeled latencies therefore do not depend on the
// speedup, but the offered load does: the same rate per wall second is
// speedup_ratio times fewer requests per modeled second. sleep(ms) on the
// handle paces in modeled time, for think times that should not change
// with the speedup.
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
// "rejected", "error"), error (null when completed in full), ttft_ms, itl_ms,
// e2e_ms, pin_ms, transfer_ms, decode_wait_ms (modeled milliseconds, 0 when
// not applicable), output_tokens, cached_tokens, prefill_worker,
// decode_worker, prefill_dp_rank and decode_dp_rank (the data-parallel
// ranks within those workers that served the request; 0 with dp_size 1),
// transfer_id (0 for aggregated requests, whose prefill_worker and
// decode_worker both name the one worker), and also
// pinned, pin_outcome ("transferred"; "aborted" when its abort or session
// deadline ended the hold; "cancelled" when the request was refused or
// withdrawn while it held; "" without a hold) and prefill_rejected,
// and truncated: a completed request whose output stopped short of
// max_tokens because its sequence reached max_model_len or outgrew the
// worker's KV pool; it stays "completed" (and counts as such in the
// metrics), with output_tokens below max_tokens and error saying which
// limit, e.g. "output truncated at 16 tokens: the sequence (80 tokens)
// reached decode-0's max_model_len 80".
//
// # Metrics
//
// Every metric is registered when the module is imported, so thresholds may
// name them before any sample exists. Each sample carries the tags cluster
// (the cluster's name, so two clusters in one script get separate
// thresholds: 'mocker_kv_aborts{cluster:cascade}'), engine and router, plus
// those listed:
//
//	mocker_requests              Counter       one per request; outcome
//	mocker_request_failed        Rate          outcome other than completed
//	mocker_requests_lost         Counter       outcome not in the metrics, counted by drain
//	mocker_ttft                  Trend (time)  when a first token came; outcome
//	mocker_itl                   Trend (time)  when two or more tokens came; outcome
//	mocker_e2e                   Trend (time)  completed requests; outcome
//	mocker_kv_pins               Counter       a prefill KV hold started; role=prefill
//	mocker_kv_pin_duration       Trend (time)  when the hold ended; role=prefill, outcome=transferred|aborted
//	mocker_kv_aborts             Counter       a hold ended by abort timeout; role=prefill
//	mocker_kv_transfer_duration  Trend (time)  transferred holds
//	mocker_decode_wait           Trend (time)  when the hold ended; role=decode, outcome=transferred|aborted
//	mocker_prefill_rejections    Counter       refused because every prefill worker was busy; role=prefill
//	mocker_kv_held_blocks        Gauge         cluster-wide held blocks, see below
//
// outcome on mocker_kv_pin_duration and mocker_decode_wait is the hold's
// outcome, so 'mocker_kv_pin_duration{outcome:aborted}' selects the aborted
// holds (each lasts exactly the abort timeout: bound aborts by count, not by
// that duration), and 'mocker_decode_wait{outcome:aborted}' how long decodes
// waited for holds that were given up: until their reservation when they
// got one (which can come after the abort: a decode learns of it when it
// connects), else the hold's duration, since a source-first decode starts
// waiting as the hold starts.
//
// mocker_kv_held_blocks is sampled after every request, after drain and,
// while VUs wait in generate, every 50 ms of wall time (one sample per
// period per cluster). A sample is the blocks held then, except that the
// first sample after the cluster reached a new peak carries that peak: held
// KV rises and falls between samples, and this makes the gauge's max equal
// the cluster's peak_held_blocks. Its value (the last sample) is what was
// held at the end; a threshold on a gauge sees only that value, so to
// assert on the peak, add drain().peak_held_blocks to a Gauge of the
// script's own in teardown.
//
// Samples are pushed when a request ends inside an iteration (or setup,
// teardown). The harness drops samples pushed after the VU was interrupted
// (a gracefulStop that ran out while the request was in flight), so such
// requests are not in the metrics; the KV handoff section of the summary,
// whose counters come from the cluster and include them, shows how many
// there were ("outside iterations"), and drain adds them, with the requests
// still in flight when it gives up, to mocker_requests_lost. A script that
// keeps 'mocker_requests{outcome:error}' and mocker_requests_lost at
// count==0 (every script in scripts/ does) fails when its cluster breaks,
// whatever else it asserts.
//
// The module adds a line per cluster to the progress display (held blocks
// now and at the peak, holds aborted, prefills refused) and, for a run
// started with a context from WithReport, hands the run's report.Report
// over once the end-of-test data is built: `mocker run --report` writes it
// as HTML.
package xk6mocker
