// Package harness runs k6-style load scripts on grafana/sobek with its own
// runner: ES modules (one runtime per VU, each module compiled once), the
// k6, k6/metrics, k6/execution, k6/timers, k6/data (SharedArray),
// k6/encoding, k6/crypto and k6/http modules (harness/k6http), an SSE
// client as k6/x/sse (harness/sse), execution segments (harness/segment),
// the timer globals (setTimeout,
// setInterval and their clear functions, on the VU's event loop and timed
// by a Clock), options with scenarios and all six k6 executors,
// thresholds, setup/teardown, handleSummary and the end-of-test summary,
// with k6's exit codes. Metrics, thresholds and summaries come from the
// harness/metrics package; k6's built-in HTTP, WebSocket, gRPC and data
// metrics are known by name so that their thresholds evaluate (empty).
//
// What never needs a runtime lives in sub-packages: harness/options reads
// the exported options (scenarios, executors, thresholds config) with the
// CLI overrides, and harness/schedule holds the executors' plans (ramping
// targets, arrival-rate start times) as pure functions of elapsed time.
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
// goroutines). A function that does I/O starts with NotInInit, which
// refuses the init context as k6 does (the script fails with exit 107). Its Exports become the module's default and named exports.
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
// run only. RegisterSummaryHook adds process-wide sections. The RunContext
// also implements SummaryDataRun (keys of the end-of-test data),
// ProgressRun (lines under the scenario rows of the progress display) and
// SummaryObserverRun (the end-of-test data once built, before
// handleSummary), reached by type assertion.
//
// On Config.Stderr, unless Config.Quiet, Run prints a start banner (the
// program's build when Config.Version gives it, the script, the outputs
// and one line per scenario, worded as k6 words them)
// before the VUs are initialised, then a progress display: redrawn in place
// on a terminal, periodic plain lines without escape codes otherwise. Logs
// (console.*, iteration exceptions, warnings) go to the same writer as
// k6-style lines, `INFO[0003] message  key=value`, above the progress
// display; stdout holds only the summary.
//
// # Clocks
//
// Everything in a run that reads or waits on time goes through the run's
// Clock: executor schedules, sleep(), Date, timers, iteration and group
// durations, sample timestamps, setup and teardown timeouts, the threshold
// and gauge ticks, and plugins (VU.Clock). Config.Clock says which:
// ClockVirtual (`mocker run --clock virtual`) is a VirtualClock: the run's
// goroutines become tasks that take turns, and time moves only when every
// task waits — in Sleep, on a Gate, or for a Participant's next event — to
// the earliest wake-up. A run is then a function of its script, options and
// seed (Math.random is seeded from options.randomSeed, 0 by default on the
// virtual clock): the summary export, handleSummary data and NDJSON are the
// same byte for byte on any host. ClockPaced (`--clock paced`, the zero
// value) makes it a paced clock (NewPacedClock):
// the same turns and results, but time moves to an instant only once the
// wall clock has nearly reached it (up to a quarter second early while a
// progress display redraws on a terminal, a second otherwise, so that
// nearby instants cost one wake-up; CatchUp waits out the difference
// before the summary), and how far the host falls behind is measured (Lag). A
// plugin makes a VU wait for a result on a Gate whose producer opens it;
// something with events of its own (a simulated cluster) joins the clock as
// a Participant, which settles each instant before time moves on and says
// when it next needs the clock. A module can throw a *ExitError to choose
// the run's exit code (e.g. ExitInvalidConfig for an option it cannot honour
// on the virtual clock). ClockWall runs every VU freely on the host's clock,
// as k6 does; what a run measures then varies with the host's load.
// ClockAuto, the command's default, picks ClockPaced for a script that
// imports a module keeping modeled time of its own (a TimeKeeper, such as
// k6/x/mocker) and ClockWall for any other, so that a plain k6 script runs
// with k6's semantics; the banner says which clock was chosen and why.
//
// Two rules keep a paced or virtual clock moving when JavaScript does not
// wait. An iteration that takes no clock time (it never slept or waited on
// a plugin) is followed by the next one a microsecond of clock time later:
// a VU that never waits runs a million iterations per clock second, as
// fast as the CPU allows, and a duration-bound scenario still ends. A task
// that keeps its turn for over half a second of wall time without waiting
// on the clock (`while (true) {}`, a long computation), while the process
// burns half a second of CPU (a starved process is not stuck), is stuck: until it
// waits, the clock moves with the wall clock, firing its timers, so the
// scenario's duration, gracefulStop and maxDuration interrupt its runtime
// as they do on the wall clock, and the run warns once. Both are
// deterministic for scripts that wait at all; a stuck VU's run is not, as
// on the wall clock.
// VU.WhenWaiting tells a plugin when the VU is about to wait (sleep, a
// promise or timer, between iterations).
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
//   - Trend percentiles come from a bounded-memory histogram, so they may
//     differ from k6's exact ones by under 1%;
//   - console prints objects in k6's inspect style but always on one line;
//   - k6/crypto has no md4 or ripemd160 (the standard library has neither;
//     the one maintained package that does has deprecated ripemd160);
//   - setup data that cannot be encoded as JSON (NaN, Infinity, a
//     function) fails the test with 107, where k6 reports a generic error;
//   - a script that imports k6/x/mocker runs on a paced clock by default:
//     the time its JavaScript takes is no script time (up to the stuck-task
//     rule above), so iteration_duration and group_duration count only waits
//     (sleep, plugins, timers), and Math.random is seeded with 0 unless
//     options.randomSeed says otherwise; `--clock wall` gives k6's
//     behaviour, which other scripts get by default;
//   - on a paced or virtual clock an iteration that never waits takes no
//     time, and the next starts a microsecond later;
//     options.randomSeed (and --random-seed) seed Math.random, which k6
//     does not offer;
//   - k6/http and k6/x/sse are refused on the virtual clock (exit 104),
//     which cannot know how long a socket takes; options.systemTags filters
//     the tags of HTTP and SSE samples only;
//   - JS timers run in the order of their deadlines on the wall clock too;
//   - when thresholds are crossed and exec.test.fail() was also called, the
//     exit code is 99 (thresholds take precedence over 110); an abort (108)
//     and script errors (107) take precedence over both.
//
// As in k6, an exception thrown by an iteration is logged with its stack and
// the test goes on with exit code 0, while exceptions in init, setup and
// teardown exit with 107.
//
// Thresholds with abortOnFail are evaluated every 2 s while the test runs,
// skipping metrics that have no sample yet. At the end, as in k6, an empty
// Counter, Gauge or Trend counts as zeros (count, rate, value and every
// Trend statistic are 0) and thresholds on an empty Rate are skipped.
package harness
