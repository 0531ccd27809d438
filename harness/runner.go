package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/options"
	"github.com/kvstrand/mocker/harness/segment"
)

// Config is one `run` of a script: what the CLI parsed.
type Config struct {
	// Script is the path of the ES module to run.
	Script string
	// Version, when set, says which build of the program runs the script:
	// the start banner shows it on a line of its own, so that a run's log
	// tells which code produced it.
	Version string
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

	// ExecutionSegment and ExecutionSegmentSequence are k6's
	// --execution-segment and --execution-segment-sequence: this process
	// runs that share of the test (see applySegment). Empty: the
	// options' executionSegment keys, or the whole test.
	ExecutionSegment, ExecutionSegmentSequence string

	// Clock is what time the script runs on. The zero value, ClockPaced,
	// gives results that do not depend on the host; see ClockMode.
	Clock ClockMode
	// VirtualEpoch is where a virtual clock starts (Date.now() at the
	// start of the run); zero means DefaultVirtualEpoch, or the wall time
	// at the start of a paced run.
	VirtualEpoch time.Time

	// clock, when set, replaces the run's clock (tests).
	clock runClock

	// observeRun, when set, gets the wall time the scenarios took (the
	// benchmark measures per-iteration cost without init and summary).
	observeRun func(time.Duration)
}

// pacedClock is the run's paced clock, with the slack its display allows.
func (cfg *Config) pacedClock() *VirtualClock {
	switch {
	case cfg.Quiet:
		return newPacedClock(cfg.VirtualEpoch, quietPaceSlack)
	case cfg.redrawsOften():
		return newPacedClock(cfg.VirtualEpoch, paceSlack)
	}
	return newPacedClock(cfg.VirtualEpoch, undisplayedPaceSlack)
}

// redrawsOften reports whether the run shows progress more often than
// once a second (the display redrawn on a terminal): a paced clock then
// runs no further ahead of the wall clock than one redraw.
func (cfg *Config) redrawsOften() bool {
	if cfg.Quiet {
		return false
	}
	if cfg.ProgressInterval > 0 {
		return cfg.ProgressInterval < time.Second
	}
	return cfg.StderrTTY
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
	clockWhy    string          // why ClockAuto chose the clock, for the banner
	net         netModules      // k6/http's shared state
	stripe      *segment.Stripe // the execution segment's share; nil: the whole test
	randomSeed  *int64          // options.randomSeed, once the options are read
	zeroWarned  sync.Once
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
	parent context.Context          // the caller\'s, whose end is an external stop
	warned <-chan struct{}          // closed once that stop\'s warning is written
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
	if cfg.Clock == ClockAuto && cfg.clock == nil {
		if cfg.VirtualEpoch.IsZero() {
			cfg.Clock, t.clockWhy = chooseClock(cfg.Script)
		} else {
			cfg.Clock, t.clockWhy = ClockPaced, "a virtual epoch was given"
		}
		t.cfg.Clock = cfg.Clock
	}
	switch {
	case cfg.clock != nil:
		t.clock = cfg.clock
	case cfg.Clock == ClockPaced:
		t.vclock = cfg.pacedClock()
		t.clock = t.vclock
	case cfg.Clock == ClockVirtual:
		t.vclock = NewVirtualClock(cfg.VirtualEpoch)
		t.clock = t.vclock
	case cfg.Clock != ClockWall:
		return exitErrorf(ExitInvalidConfig, "harness: Config.Clock: want ClockPaced, ClockVirtual, ClockWall or ClockAuto, got %d", int(cfg.Clock))
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
	// A module that throws an *ExitError (a Go error value) chooses the
	// exit code, e.g. ExitInvalidConfig for an option it cannot honour.
	var ee *ExitError
	if errors.As(err, &ee) {
		return &ExitError{Code: ee.Code, Err: fmt.Errorf("%s: %w", phase, ee.Err)}
	}
	return &ExitError{Code: ExitScriptException, Err: fmt.Errorf("%s: %s", phase, exceptionText(err))}
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
