package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/options"
)

// Config is one `run` of a script: what the CLI parsed.
type Config struct {
	// Script is the path of the ES module to run.
	Script string
	// Env is exactly what scripts see as __ENV (scenario env merged over
	// it). Run never adds the process environment by itself; the CLI, like
	// `k6 run`, puts the process environment in first and the -e variables
	// over it, unless --include-system-env-vars=false.
	Env map[string]string
	// Overrides are the CLI flags that take precedence over options.
	Overrides Overrides
	// Outputs are --out values; "json=FILE" writes k6's NDJSON to FILE.
	Outputs []string
	// SummaryExport, when set, receives k6's legacy --summary-export JSON.
	SummaryExport string
	// Quiet disables the progress display.
	Quiet bool
	// NoColor is k6's --no-color: no ANSI colours anywhere, and
	// handleSummary's data.options.noColor is true. Without it the text
	// summary is still plain when stdout is not a terminal (StdoutTTY), as
	// in k6, but data.options.noColor stays false.
	NoColor bool
	// Stdout receives the summary; Stderr the progress display and logs.
	// Nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// StdoutTTY and StderrTTY say whether those are terminals: a terminal
	// stderr gets a redrawn progress display, anything else periodic lines.
	StdoutTTY, StderrTTY bool
	// ProgressInterval overrides how often progress is shown (0: 250 ms on
	// a terminal, every 10 s otherwise, shortened for short tests).
	ProgressInterval time.Duration
	// TermWidth is the width of the stderr terminal in columns; progress
	// lines are cut to fit it. 0 means unknown (no cutting).
	TermWidth int

	// VirtualClock runs the script on virtual time (`--clock virtual`):
	// every time the script and its plugins read or wait on comes from a
	// VirtualClock, which advances only when every VU and participant is
	// blocked. The run is as fast as the CPU allows and its results do not
	// depend on the host.
	VirtualClock bool
	// VirtualEpoch is where a virtual clock starts (Date.now() at the
	// start of the run); zero means DefaultVirtualEpoch.
	VirtualEpoch time.Time

	// clock, when set, replaces the run's clock (tests).
	clock runClock

	// observeRun, when set, gets the wall time the scenarios took (the
	// benchmark measures per-iteration cost without init and summary).
	observeRun func(time.Duration)
}

// builtinMetrics are the metrics the runner itself emits.
type builtinMetrics struct {
	iterations, iterationDuration, droppedIterations *metrics.Metric
	vus, vusMax, checks, groupDuration               *metrics.Metric
}

// testRun is the state shared by every VU of one Run.
type testRun struct {
	cfg         Config
	opts        *options.Options
	reg         *metrics.Registry
	coll        *metrics.Collector
	bm          builtinMetrics
	loader      *loader
	main        sobek.CyclicModuleRecord
	exportNames []string
	scriptPath  string
	env         map[string]string
	files       fileCache
	groups      *groupTree
	clock       runClock // the run's time source (wall or virtual)
	vclock      *VirtualClock
	randomSeed  *int64 // options.randomSeed, once the options are read
	wallStart   time.Time
	shared      sharedArrays
	logger      *slog.Logger
	stderr      *stderrWriter
	id          uint64

	optionsJSON string
	setupJSON   string

	ctx    context.Context
	cancel context.CancelCauseFunc
	phase  atomic.Pointer[runPhase] // what an external stop still lets run
	start  time.Time                // before setup, as k6 counts the test run duration
	begun  atomic.Bool

	// vus and vus_max are sampled only while scenarios run
	gaugeMu    sync.Mutex
	running    bool
	vusSampled atomic.Bool

	pluginHooks // ProgressRun and SummaryObserverRun

	endMu    sync.Mutex
	endFns   []func()
	sections []func(io.Writer)
	data     []summaryDatum

	scenarios []*scenarioRun
	nextVUID  atomic.Uint64

	iterationsCompleted   atomic.Int64
	iterationsInterrupted atomic.Int64
	vusActive             atomic.Int64
	vusInitialized        atomic.Int64

	abortMu     sync.Mutex
	abortReason string
	aborted     atomic.Bool
	failed      atomic.Bool
	failReasons []string
	thAborted   atomic.Bool
}

// Run executes the script described by cfg and returns nil when the test
// passed, or an *ExitError carrying the exit code (see ExitCode).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	t := &testRun{cfg: cfg, reg: metrics.NewRegistry(), groups: newGroupTree(), env: cfg.Env, id: runIDs.Add(1), clock: WallClock{}}
	t.stderr = newStderrWriter(cfg.Stderr, cfg.StderrTTY)
	t.logger = slog.New(newLogHandler(t.stderr, slog.LevelInfo, t.elapsed))
	if t.env == nil {
		t.env = map[string]string{}
	}
	switch {
	case cfg.clock != nil:
		t.clock = cfg.clock
	case cfg.VirtualClock:
		t.vclock = NewVirtualClock(cfg.VirtualEpoch)
		t.clock = t.vclock
	}
	t.wallStart = time.Now()
	defer t.end()
	if err := t.registerBuiltins(); err != nil {
		return err
	}
	err := t.run(ctx)
	if ctx.Err() != nil {
		// An interrupted run ends with k6's external-abort code even when
		// teardown or the thresholds would have said otherwise.
		return &ExitError{Code: ExitExternalAbort, Err: externalAbortError(ctx)}
	}
	return err
}

// runPhase is the part of the run in progress, for the message logged when
// the run is stopped from outside.
type runPhase struct{ note string }

// stopNote says what still runs after a stop in this phase; a nil phase is
// init, after which nothing more runs.
func (p *runPhase) stopNote() string {
	if p == nil {
		return ""
	}
	return p.note
}

var (
	phaseSetup     = &runPhase{"; setup did not finish, so teardown is skipped (as in k6); the summary still runs"}
	phaseScenarios = &runPhase{"; teardown and the summary still run"}
	phaseTeardown  = &runPhase{"; teardown goes on (up to teardownTimeout) and the summary still runs"}
	phaseSummary   = &runPhase{"; the summary is still written"}
)

// runIDs numbers the runs of the process.
var runIDs atomic.Uint64

// ID is the run's number in the process (RunContext).
func (t *testRun) ID() uint64 { return t.id }

// OnEnd registers f to run when the run ends (RunContext).
func (t *testRun) OnEnd(f func()) {
	if f == nil {
		return
	}
	t.endMu.Lock()
	t.endFns = append(t.endFns, f)
	t.endMu.Unlock()
}

// AddSummarySection adds a run-scoped section to the text summary
// (RunContext).
func (t *testRun) AddSummarySection(f func(io.Writer)) {
	if f == nil {
		return
	}
	t.endMu.Lock()
	t.sections = append(t.sections, f)
	t.endMu.Unlock()
}

func (t *testRun) summarySections() []func(io.Writer) {
	t.endMu.Lock()
	defer t.endMu.Unlock()
	return slices.Clone(t.sections)
}

// end runs the OnEnd functions, last registered first, each exactly once.
func (t *testRun) end() {
	t.endMu.Lock()
	fns := t.endFns
	t.endFns = nil
	t.endMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.logger.Error("a plugin's end-of-run function panicked", "panic", fmt.Sprint(r))
				}
			}()
			fns[i]()
		}()
	}
}

// externalAbortError says why the caller's context ended the run: the
// cause it was cancelled with (the CLI names the signal), or a generic
// message.
func externalAbortError(ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case cause == nil || errors.Is(cause, context.Canceled):
		return errors.New("test run was aborted: its context was cancelled")
	case errors.Is(cause, context.DeadlineExceeded):
		return errors.New("test run was aborted: its context's deadline passed")
	}
	return cause
}

func (t *testRun) registerBuiltins() error {
	var err error
	reg := func(name string, mt metrics.MetricType, vt metrics.ValueType) *metrics.Metric {
		if err != nil {
			return nil
		}
		var m *metrics.Metric
		m, err = t.reg.Register(name, mt, vt)
		return m
	}
	t.bm = builtinMetrics{
		iterations:        reg("iterations", metrics.Counter, metrics.Default),
		iterationDuration: reg("iteration_duration", metrics.Trend, metrics.Time),
		droppedIterations: reg("dropped_iterations", metrics.Counter, metrics.Default),
		vus:               reg("vus", metrics.Gauge, metrics.Default),
		vusMax:            reg("vus_max", metrics.Gauge, metrics.Default),
		checks:            reg("checks", metrics.Rate, metrics.Default),
		groupDuration:     reg("group_duration", metrics.Trend, metrics.Time),
	}
	// k6's other built-in metrics (HTTP, WebSocket, gRPC, data) are known
	// by name and type even though nothing here emits them, so that
	// thresholds copied from k6 scripts are evaluated (empty) as k6 does
	// rather than rejected as unknown metrics.
	for _, b := range k6OtherBuiltins {
		reg(b.name, b.typ, b.contains)
	}
	if err != nil {
		return fmt.Errorf("registering built-in metrics: %w", err)
	}
	return nil
}

// k6OtherBuiltins are k6's built-in metrics the harness never emits.
var k6OtherBuiltins = []struct {
	name     string
	typ      metrics.MetricType
	contains metrics.ValueType
}{
	{"http_reqs", metrics.Counter, metrics.Default},
	{"http_req_failed", metrics.Rate, metrics.Default},
	{"http_req_duration", metrics.Trend, metrics.Time},
	{"http_req_blocked", metrics.Trend, metrics.Time},
	{"http_req_connecting", metrics.Trend, metrics.Time},
	{"http_req_tls_handshaking", metrics.Trend, metrics.Time},
	{"http_req_sending", metrics.Trend, metrics.Time},
	{"http_req_waiting", metrics.Trend, metrics.Time},
	{"http_req_receiving", metrics.Trend, metrics.Time},
	{"ws_sessions", metrics.Counter, metrics.Default},
	{"ws_msgs_sent", metrics.Counter, metrics.Default},
	{"ws_msgs_received", metrics.Counter, metrics.Default},
	{"ws_ping", metrics.Trend, metrics.Time},
	{"ws_session_duration", metrics.Trend, metrics.Time},
	{"ws_connecting", metrics.Trend, metrics.Time},
	{"grpc_req_duration", metrics.Trend, metrics.Time},
	{"data_sent", metrics.Counter, metrics.Data},
	{"data_received", metrics.Counter, metrics.Data},
}

func (t *testRun) opts0Tags() map[string]string {
	if t.opts == nil {
		return nil
	}
	return t.opts.Tags
}

func (t *testRun) elapsed() time.Duration {
	if !t.begun.Load() {
		return 0
	}
	return t.clock.Now().Sub(t.start)
}

// push hands samples to the collector; samples before the collector exists
// (init context) are dropped.
func (t *testRun) push(samples ...metrics.Sample) {
	if t.coll != nil {
		t.coll.Add(samples...)
	}
}

func (t *testRun) logLine(level, msg string) {
	switch level {
	case "error":
		t.logger.Error(msg, "source", "console")
	case "warn":
		t.logger.Warn(msg, "source", "console")
	case "debug":
		t.logger.Debug(msg, "source", "console")
	default:
		t.logger.Info(msg, "source", "console")
	}
}

// logException reports a script error thrown by an iteration; as in k6 the
// test goes on.
func (t *testRun) logException(err error, sc *options.Scenario) {
	t.logger.Error(exceptionText(err), "executor", sc.Executor, "scenario", sc.Name)
}

// exceptionText renders a JS exception with its stack trace.
func exceptionText(err error) string {
	var ex *sobek.Exception
	if errors.As(err, &ex) {
		return strings.TrimSpace(ex.String())
	}
	return err.Error()
}

func (t *testRun) abort(reason string) {
	t.abortMu.Lock()
	if !t.aborted.Load() {
		t.abortReason = reason
		t.aborted.Store(true)
	}
	t.abortMu.Unlock()
	if t.cancel != nil {
		t.cancel(&abortError{reason: reason})
	}
}

func (t *testRun) markFailed(reason string) {
	t.abortMu.Lock()
	t.failReasons = append(t.failReasons, reason)
	t.abortMu.Unlock()
	t.failed.Store(true)
	if reason != "" {
		t.logger.Warn("test marked as failed: " + reason)
	} else {
		t.logger.Warn("test marked as failed")
	}
}

func scriptError(phase string, err error) *ExitError {
	var ae *abortError
	var ie *sobek.InterruptedError
	if errors.As(err, &ie) {
		if a, ok := ie.Value().(*abortError); ok {
			ae = a
		}
	}
	if ae != nil || errors.As(err, &ae) {
		return &ExitError{Code: ExitScriptAborted, Err: fmt.Errorf("%s: %w", phase, ae)}
	}
	return &ExitError{Code: ExitScriptException, Err: fmt.Errorf("%s: %s", phase, exceptionText(err))}
}

// load parses and links the script and its static imports. v0 is the
// primary VU: Go modules are instantiated in its runtime while linking, so
// their export names are known (see goModuleRecord).
func (t *testRun) load(v0 *vu) error {
	t.loader.setPrimary(v0)
	defer t.loader.setPrimary(nil) // later VUs instantiate on their own goroutines
	rec, err := t.loader.loadFile(t.scriptPath)
	if err != nil {
		return exitErrorf(ExitScriptException, "%v", err)
	}
	if err := rec.Link(); err != nil {
		return exitErrorf(ExitScriptException, "linking %s: %v", t.cfg.Script, err)
	}
	cyc, ok := rec.(sobek.CyclicModuleRecord)
	if !ok {
		return exitErrorf(ExitScriptException, "script %s is not an ES module", t.cfg.Script)
	}
	t.main = cyc
	rec.GetExportedNames(func(names []string) { t.exportNames = append([]string(nil), names...) })
	return nil
}

// run goes through the phases of a test, as k6 does: init (VU 0, the
// options, the outputs and every scenario's VUs), setup, the scenarios,
// teardown and the summary. A failed init or setup ends the run there;
// teardown and the summary run even after an abort.
func (t *testRun) run(parent context.Context) (retErr error) {
	ctx, unwatch := t.watch(parent)
	defer unwatch()

	v0, err := t.initPhase(ctx)
	defer func() {
		if err := t.release(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if err != nil {
		return err
	}
	defer t.startClock(ctx)()

	if err := t.setupPhase(parent, v0); err != nil {
		return err
	}
	t.scenariosPhase(ctx)
	teardownErr := t.teardownPhase(v0)
	return t.summaryPhase(v0, teardownErr)
}

// watch gives the run its own context under parent (t.ctx, t.cancel) and
// reports a stop from outside: it wakes what waits on the clock and logs
// what still runs in the current phase. The returned func undoes it once
// that warning is out.
func (t *testRun) watch(parent context.Context) (context.Context, func()) {
	ctx, cancelCtx := context.WithCancelCause(parent)
	// Whoever cancels the run (an abort, a threshold, a signal) wakes what
	// waits on the clock for it before time moves on.
	cancel := func(cause error) {
		cancelCtx(cause)
		t.clock.cancelled()
	}
	t.ctx, t.cancel = ctx, cancel
	stopSweep := context.AfterFunc(parent, t.clock.cancelled)
	warned := make(chan struct{})
	stopWatch := context.AfterFunc(parent, func() {
		defer close(warned)
		t.logger.Warn("stopping the test (" + externalAbortError(parent).Error() + ")" + t.phase.Load().stopNote())
	})
	return ctx, func() {
		if !stopWatch() {
			<-warned // the warning comes before whatever the caller prints next
		}
		stopSweep()
		cancel(nil)
	}
}

// initPhase opens the outputs, initialises VU 0 (which reads the options
// and later runs setup, teardown and handleSummary), starts the metrics
// collector and initialises every scenario's starting VUs. Whatever step
// it gets to, release undoes.
func (t *testRun) initPhase(ctx context.Context) (*vu, error) {
	// Output files are checked before anything runs: a typo in a path
	// must not cost a whole test.
	outs, err := t.openOutputs()
	if err != nil {
		return nil, err
	}
	v0, err := t.initPrimaryVU(ctx)
	if err == nil {
		err = t.startCollector(outs)
	}
	if err != nil {
		closeOutputs(outs) // no collector took them
		return nil, err
	}
	if !t.cfg.Quiet {
		t.writeBanner(t.stderr)
	}
	if err := t.initScenarios(ctx); err != nil {
		return nil, err
	}
	return v0, nil
}

// initPrimaryVU loads the script into VU 0, runs its init code and reads
// the options it exports.
func (t *testRun) initPrimaryVU(ctx context.Context) (*vu, error) {
	abs, err := filepath.Abs(t.cfg.Script)
	if err != nil {
		return nil, exitErrorf(ExitScriptException, "script %q: %v", t.cfg.Script, err)
	}
	t.scriptPath = abs
	t.loader = newLoader(builtinModules())
	v0, err := t.makeVU(ctx, 0)
	if err != nil {
		return nil, scriptError("init", err)
	}
	if err := t.load(v0); err != nil {
		return nil, err
	}
	if err := v0.init(ctx); err != nil {
		return nil, scriptError("init", err)
	}
	if err := t.readOptions(v0); err != nil {
		return nil, err
	}
	return v0, nil
}

// readOptions parses the options VU 0 exports, with the CLI overrides,
// and checks that every scenario's exec function exists.
func (t *testRun) readOptions(v0 *vu) error {
	rawOpts := []byte("null")
	if o, ok := v0.exports["options"]; ok && !sobek.IsUndefined(o) {
		// JSON would turn NaN and Infinity into null, which reads as "not
		// set": a silent default instead of the value the script meant.
		if err := checkFiniteOptions(o); err != nil {
			return err
		}
		s, err := jsonStringify(v0.rt, o)
		if err != nil {
			return exitErrorf(ExitInvalidConfig, "options: cannot be converted to JSON: %v", err)
		}
		rawOpts = []byte(s)
	}
	var err error
	if t.opts, err = parseOptions(rawOpts, t.cfg.Overrides); err != nil {
		return err
	}
	for _, k := range options.UnknownKeys(rawOpts) {
		t.logger.Warn("options." + k + " is not a k6 option; it is ignored")
	}
	t.optionsJSON = t.opts.ConsolidatedJSON()
	if t.randomSeed = t.opts.RandomSeed; t.randomSeed != nil {
		// VU 0 was made before the options were read.
		seed := uint64(*t.randomSeed)
		v0.rng.Seed(seed, 0)
	}
	for _, sc := range t.opts.Scenarios {
		if _, ok := v0.fns[sc.Exec]; !ok {
			return exitErrorf(ExitInvalidConfig, "scenarios.%s.exec: the script exports no function %q", sc.Name, sc.Exec)
		}
	}
	v0.tags = metrics.NewTags(t.opts.Tags)
	return nil
}

// startCollector parses the thresholds and hands outs to a new collector,
// which closes them when the run is released.
func (t *testRun) startCollector(outs []metrics.Output) error {
	ths, err := metrics.ParseThresholds(t.opts.Thresholds, t.reg)
	if err != nil {
		return &ExitError{Code: ExitInvalidConfig, Err: fmt.Errorf("thresholds: %w", err)}
	}
	t.coll = metrics.NewCollector(t.reg, ths, outs...)
	return nil
}

// release undoes init: the VUs leave the loader and the collector closes
// the outputs.
func (t *testRun) release() error {
	if t.loader != nil {
		t.releaseVUs()
	}
	if t.coll != nil {
		if err := t.coll.Close(); err != nil {
			return fmt.Errorf("closing outputs: %w", err)
		}
	}
	return nil
}

// startClock starts the test run's clock, which as in k6 includes setup
// and teardown (testRunDurationMs, Counter rates), and the samples taken
// every second; the returned func stops them.
func (t *testRun) startClock(ctx context.Context) func() {
	t.start = t.clock.Now()
	t.begun.Store(true)
	ticks, stopTicks := context.WithCancel(context.WithoutCancel(ctx))
	tickWG := newTasks(t.clock)
	tickWG.Go(func() { t.everySecond(ticks) })
	return func() {
		stopTicks()
		t.clock.cancelled()
		tickWG.Wait()
	}
}

// setupPhase runs the script's setup, unless it has none or noSetup says
// so. Its error ends the run.
func (t *testRun) setupPhase(parent context.Context, v0 *vu) error {
	fn, ok := v0.fns["setup"]
	if !ok || t.opts.NoSetup {
		return nil
	}
	t.phase.Store(phaseSetup)
	err := t.runSetup(v0, fn)
	if err != nil && parent.Err() != nil {
		// Stopped from outside during setup: as in k6, teardown is
		// skipped (setup did not finish) but the summary is written.
		t.phase.Store(phaseSummary)
		runDuration := t.elapsed()
		t.coll.Evaluate(runDuration)
		_ = t.writeSummary(v0, runDuration)
	}
	return err
}

// scenariosPhase runs every scenario to its end, with the thresholds
// checked and the progress shown beside them.
func (t *testRun) scenariosPhase(ctx context.Context) {
	t.phase.Store(phaseScenarios)
	t.setRunning(true)
	began := time.Now()
	stopMonitors := t.startMonitors(ctx)
	wg := newTasks(t.clock)
	for _, s := range t.scenarios {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	t.setRunning(false)
	stopMonitors()
	if t.cfg.observeRun != nil {
		t.cfg.observeRun(time.Since(began))
	}
}

// setRunning says whether the scenarios run, which is when the VU gauges
// are sampled.
func (t *testRun) setRunning(running bool) {
	t.gaugeMu.Lock()
	t.running = running
	t.gaugeMu.Unlock()
}

// startMonitors starts what runs beside the scenarios: the threshold
// checks and the progress display. The returned func stops both and waits
// for them.
func (t *testRun) startMonitors(ctx context.Context) func() {
	bg, stopBG := context.WithCancel(ctx)
	bgTasks := newTasks(t.clock)
	// The display stops once the scenarios have stopped, not as soon as
	// the test is cancelled: its last picture shows how they ended.
	shown, stopShown := context.WithCancel(context.WithoutCancel(ctx))
	bgTasks.Go(func() { t.evaluateThresholds(bg) })
	// The display is not a task: it only reads, on the wall clock.
	var bgWG sync.WaitGroup
	if !t.cfg.Quiet {
		p := newProgress(t)
		bgWG.Go(func() { p.run(shown) })
	}
	return func() {
		stopBG()
		stopShown()
		t.clock.cancelled()
		bgTasks.Wait()
		bgWG.Wait()
	}
}

// teardownPhase runs the script's teardown, unless it has none or
// noTeardown says so. It runs even when the test was aborted
// (exec.test.abort, an abortOnFail threshold, a signal), on a context
// those do not cancel.
func (t *testRun) teardownPhase(v0 *vu) error {
	fn, ok := v0.fns["teardown"]
	if !ok || t.opts.NoTeardown {
		return nil
	}
	t.phase.Store(phaseTeardown)
	return t.runTeardown(v0, fn)
}

// summaryPhase evaluates the thresholds, writes the summary and returns
// the run's outcome; phaseErr is what teardown returned.
func (t *testRun) summaryPhase(v0 *vu, phaseErr error) error {
	t.phase.Store(phaseSummary)
	runDuration := t.elapsed()
	failed, _ := t.coll.Evaluate(runDuration)
	if err := t.writeSummary(v0, runDuration); err != nil && phaseErr == nil {
		phaseErr = err
	}
	if t.vclock != nil {
		wall := time.Since(t.wallStart)
		t.logger.Info(fmt.Sprintf("virtual clock: ran %s of script time in %s of wall time (%s)",
			runDuration.Round(time.Millisecond), wall.Round(time.Millisecond), t.speedFactor()))
	}
	return t.finalError(phaseErr, failed)
}

// finalError applies k6's precedence: an abort, then script errors, then
// crossed thresholds, then exec.test.fail().
func (t *testRun) finalError(phaseErr error, thresholdsFailed bool) error {
	if t.aborted.Load() {
		return exitErrorf(ExitScriptAborted, "test aborted: %s", t.abortReason)
	}
	if phaseErr != nil {
		return phaseErr
	}
	if thresholdsFailed || t.thAborted.Load() {
		names := t.failedThresholdMetrics()
		if t.thAborted.Load() {
			return exitErrorf(ExitThresholdsFailed, "thresholds on metrics '%s' were crossed; at least one has abortOnFail enabled, stopping test prematurely", names)
		}
		return exitErrorf(ExitThresholdsFailed, "thresholds on metrics '%s' have been crossed", names)
	}
	if t.failed.Load() {
		return exitErrorf(ExitTestFailed, "test marked as failed by exec.test.fail()")
	}
	return nil
}

// failedThresholdMetrics names the metrics whose thresholds failed at the
// last evaluation.
func (t *testRun) failedThresholdMetrics() string {
	return strings.Join(metrics.FailedKeys(t.coll.Results(), false), ", ")
}

func (t *testRun) openOutputs() ([]metrics.Output, error) {
	var outs []metrics.Output
	closeAll := func() { closeOutputs(outs) }
	for _, o := range t.cfg.Outputs {
		kind, arg, _ := strings.Cut(o, "=")
		switch kind {
		case "json":
			if arg == "" {
				closeAll()
				return nil, exitErrorf(ExitInvalidConfig, "--out %s: want json=FILE", o)
			}
			out, err := metrics.NewJSONFileOutput(arg)
			if err != nil {
				closeAll()
				return nil, exitErrorf(ExitInvalidConfig, "--out %s: %v", o, err)
			}
			outs = append(outs, out)
		default:
			closeAll()
			return nil, exitErrorf(ExitInvalidConfig, "--out %s: unknown output %q (supported: json=FILE)", o, kind)
		}
	}
	if p := t.cfg.SummaryExport; p != "" {
		if err := CheckWritable(p); err != nil {
			closeAll()
			return nil, exitErrorf(ExitInvalidConfig, "--summary-export %s: the file cannot be written: %v", p, err)
		}
	}
	return outs, nil
}

// closeOutputs closes outputs that no collector owns.
func closeOutputs(outs []metrics.Output) {
	for _, o := range outs {
		_ = o.Close()
	}
}

// CheckWritable makes sure path can be created or written, without
// changing an existing file and without leaving a new one behind: how an
// output path is checked before a run starts.
func CheckWritable(path string) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	err = f.Close()
	if errors.Is(statErr, fs.ErrNotExist) {
		_ = os.Remove(path)
	}
	return err
}

// initVU creates and initialises one more VU with the next id.
func (t *testRun) initVU(ctx context.Context) (*vu, error) {
	id := t.nextVUID.Add(1)
	v, err := t.newVU(ctx, id)
	if err != nil {
		return nil, err
	}
	t.vusInitialized.Add(1)
	return v, nil
}

// initScenarios initialises every scenario's starting VUs in parallel.
func (t *testRun) initScenarios(ctx context.Context) error {
	type job struct {
		s   *scenarioRun
		idx int
	}
	var jobs []job
	for _, sc := range t.opts.Scenarios {
		tags := metrics.NewTags(t.opts.Tags)
		keys := make([]string, 0, len(sc.Tags))
		for k := range sc.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tags = tags.With(k, sc.Tags[k])
		}
		tags = tags.With("scenario", sc.Name)
		s := &scenarioRun{t: t, cfg: sc, tags: tags}
		s.vus = make([]*vu, sc.InitialVUs())
		for i := range s.vus {
			jobs = append(jobs, job{s, i})
		}
		t.scenarios = append(t.scenarios, s)
	}
	ids := make([]uint64, len(jobs))
	for i := range jobs {
		ids[i] = t.nextVUID.Add(1)
	}
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := t.newVU(ctx, ids[i])
			if err != nil {
				errs[i] = err
				return
			}
			t.vusInitialized.Add(1)
			j.s.vus[j.idx] = v
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return scriptError("init", err)
		}
	}
	return nil
}

func (t *testRun) releaseVUs() {
	t.loader.vus.Range(func(k, _ any) bool {
		t.loader.vus.Delete(k)
		return true
	})
}

func (t *testRun) runSetup(v0 *vu, fn sobek.Callable) error {
	ctx, cancel := t.clock.WithTimeout(t.ctx, t.opts.SetupTimeout)
	defer cancel()
	release := v0.activate(ctx)
	defer release()
	v0.group = "::setup"
	v0.recomputeTags()
	defer func() { v0.group = ""; v0.recomputeTags() }()
	ret, err := v0.callValue(fn)
	if err == nil && ctx.Err() != nil {
		// setup returned, but only because its context ended under it
		// (sleep wakes up on cancellation): it did not finish.
		err = context.Cause(ctx)
	}
	if err != nil {
		if t.aborted.Load() {
			return exitErrorf(ExitScriptAborted, "test aborted in setup: %s", t.abortReason)
		}
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return exitErrorf(ExitSetupTimeout, "setup() did not finish within setupTimeout (%s)", t.opts.SetupTimeout)
		}
		return scriptError("setup", err)
	}
	if ret != nil && !sobek.IsUndefined(ret) {
		// As k6 does: the exported Go value goes through encoding/json, so
		// an undefined property arrives as null (key kept), a Date as its
		// RFC 3339 string, and NaN, Infinity or a function are errors.
		b, err := json.Marshal(ret.Export())
		if err != nil {
			return exitErrorf(ExitScriptException, "setup: the data it returned cannot be passed to the VUs as JSON: %v", err)
		}
		t.setupJSON = string(b)
	}
	return nil
}

func (t *testRun) runTeardown(v0 *vu, fn sobek.Callable) error {
	ctx, cancel := contextWithTimeout(t, t.opts.TeardownTimeout)
	defer cancel()
	release := v0.activate(ctx)
	defer release()
	v0.group = "::teardown"
	v0.recomputeTags()
	defer func() { v0.group = ""; v0.recomputeTags() }()
	if err := v0.call(fn, v0.callData()); err != nil {
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return exitErrorf(ExitTeardownTimeout, "teardown() did not finish within teardownTimeout (%s)", t.opts.TeardownTimeout)
		}
		return scriptError("teardown", err)
	}
	return nil
}

// pushVUGauges emits vus (at least atLeast: a starting batch of VUs that
// already ran through short work still counts) and vus_max.
func (t *testRun) pushVUGauges(atLeast int64) {
	now := t.clock.Now()
	tags := metrics.NewTags(t.opts.Tags)
	t.push(
		metrics.Sample{Metric: t.bm.vus, Tags: tags, Time: now, Value: float64(max(t.vusActive.Load(), atLeast))},
		metrics.Sample{Metric: t.bm.vusMax, Tags: tags, Time: now, Value: float64(t.vusInitialized.Load())},
	)
}

// sampleVUs emits the vus and vus_max gauges, but only while scenarios run:
// before the first VU starts and after the last one stops the count says
// nothing about the load, and a 0 there would spoil min and thresholds.
func (t *testRun) sampleVUs(atLeast int64) {
	t.gaugeMu.Lock()
	defer t.gaugeMu.Unlock()
	if t.running {
		t.pushVUGauges(atLeast)
	}
}

// vusStarted takes the first vus sample once the first scenario's starting
// n VUs have become active, so that a short test still gets one.
func (t *testRun) vusStarted(n int64) {
	if !t.vusSampled.Load() && t.vusSampled.CompareAndSwap(false, true) {
		t.sampleVUs(n)
	}
}

// everySecond samples the VU gauges, as k6 does, and hands buffered
// samples to the outputs so that an NDJSON file can be followed live and
// keeps what was measured if the process dies.
func (t *testRun) everySecond(ctx context.Context) {
	for t.clock.Sleep(ctx, time.Second) {
		t.sampleVUs(0)
		t.coll.Flush()
	}
}

// evaluateThresholds checks thresholds every 2 s; a failing abortOnFail
// threshold stops the test.
func (t *testRun) evaluateThresholds(ctx context.Context) {
	for t.clock.Sleep(ctx, thresholdInterval) {
		if _, abort := t.coll.EvaluateRunning(t.elapsed()); abort {
			t.thAborted.Store(true)
			t.logger.Error("thresholds with abortOnFail were crossed; stopping the test")
			t.cancel(errors.New("thresholds crossed"))
			return
		}
	}
}

// thresholdInterval is how often thresholds are evaluated during the run.
var thresholdInterval = 2 * time.Second

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// contextWithTimeout gives end-of-test work its own deadline that a
// cancelled test context (abort) does not cut short.
func contextWithTimeout(t *testRun, d time.Duration) (context.Context, context.CancelFunc) {
	return t.clock.WithTimeout(context.WithoutCancel(t.ctx), d)
}
