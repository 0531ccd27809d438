// Package harness runs k6-style load scripts on grafana/sobek with its own
// runner: ES modules (one runtime per VU, each module compiled once), the
// k6, k6/metrics and k6/execution modules, options with scenarios and all
// six k6 executors, thresholds, setup/teardown, handleSummary and the
// end-of-test summary, with k6's exit codes. Metrics, thresholds and
// summaries come from the harness/metrics package.
//
// The harness knows nothing of what a script exercises: that comes from
// plugins, Go-backed JS modules registered by import path as xk6
// extensions are:
//
//	func init() { harness.Register("k6/x/mine", myModule{}) }
//
// A Module gets one NewModuleInstance call per VU runtime with a VU handle
// (runtime, context, id, metric registry, Push for samples carrying the
// VU's tags, InInit, and RegisterCallback to settle Promises from other
// goroutines). Its Exports become the module's default and named exports.
// VU 0's instance is created while the script links, before any init code
// runs, so that `import * as m` and named imports see the same export names
// in every VU; importing a name the module does not export is a
// SyntaxError (exit 107).
//
// State that lives as long as a test run belongs to the run, not the
// process: VU.Run returns the RunContext shared by the run's VUs, with an
// ID to key plugin state by, OnEnd to release what the run created (called
// once after teardown and the summary, also after an abort, a signal or a
// failed init) and AddSummarySection for text-summary sections about this
// run only. RegisterSummaryHook adds process-wide sections.
//
// On Config.Stderr, unless Config.Quiet, Run prints a start banner (the
// script, the outputs and one line per scenario, worded as k6 words them)
// before the VUs are initialised, then a progress display: redrawn in place
// on a terminal, periodic plain lines without escape codes otherwise. Logs
// (console.*, iteration exceptions, warnings) go to the same writer as
// k6-style lines, `INFO[0003] message  key=value`, above the progress
// display; stdout holds only the summary.
//
// Cancelling the context given to Run is an external abort (the CLI does it
// on SIGINT/SIGTERM; a second signal exits at once): the scenarios stop,
// teardown still runs with its own timeout, the summary is written, and the
// exit code is 105. A stop during setup skips teardown, as k6 does when
// setup did not finish; the summary is still written.
//
// Differences from k6, on purpose:
//   - durations below one second are accepted for constant-vus and
//     maxDuration, so that smoke tests can be short;
//   - Config.Env is exactly __ENV: Run does not add the process environment
//     itself (the CLI does, by default, as `k6 run` does);
//   - an exception thrown by an iteration is logged with its stack and the
//     test goes on with exit code 0 (as in k6); exceptions in init, setup,
//     teardown exit with 107;
//   - when thresholds are crossed and exec.test.fail() was also called, the
//     exit code is 99 (thresholds take precedence over 110); an abort (108)
//     and script errors (107) take precedence over both.
//
// Thresholds with abortOnFail are evaluated every 2 s while the test runs,
// skipping metrics that have no sample yet. At the end, as in k6, an empty
// Counter, Gauge or Trend counts as zeros (count, rate, value and every
// Trend statistic are 0) and thresholds on an empty Rate are skipped.
package harness
