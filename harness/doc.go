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
// RegisterSummaryHook appends sections to the text summary.
//
// Differences from k6, on purpose:
//   - durations below one second are accepted for constant-vus and
//     maxDuration, so that smoke tests can be short;
//   - __ENV holds only -e variables (k6's default); the CLI adds the
//     process environment with --include-system-env-vars;
//   - an exception thrown by an iteration is logged with its stack and the
//     test goes on with exit code 0 (as in k6); exceptions in init, setup,
//     teardown exit with 107;
//   - when thresholds are crossed and exec.test.fail() was also called, the
//     exit code is 99 (thresholds take precedence over 110); an abort (108)
//     and script errors (107) take precedence over both.
package harness
