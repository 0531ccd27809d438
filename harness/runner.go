package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
)

// Config is one `run` of a script: what the CLI parsed.
type Config struct {
	// Script is the path of the ES module to run.
	Script string
	// Env holds the -e KEY=VALUE variables exposed as __ENV. As in k6, the
	// process environment is not included unless the caller copies it in
	// (the CLI does so for --include-system-env-vars).
	Env map[string]string
	// Overrides are the CLI flags that take precedence over options.
	Overrides Overrides
	// Outputs are --out values; "json=FILE" writes k6's NDJSON to FILE.
	Outputs []string
	// SummaryExport, when set, receives k6's legacy --summary-export JSON.
	SummaryExport string
	// Quiet disables the progress display.
	Quiet bool
	// NoColor disables ANSI colours in the summary and progress display.
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
	opts        *Options
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
	logger      *slog.Logger
	stderrMu    sync.Mutex

	optionsJSON string
	setupJSON   string

	ctx    context.Context
	cancel context.CancelCauseFunc
	start  time.Time
	begun  atomic.Bool

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
	t := &testRun{cfg: cfg, reg: metrics.NewRegistry(), groups: newGroupTree(), env: cfg.Env}
	t.logger = slog.New(slog.NewTextHandler(&lockedWriter{mu: &t.stderrMu, w: cfg.Stderr}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if t.env == nil {
		t.env = map[string]string{}
	}
	if err := t.registerBuiltins(); err != nil {
		return err
	}
	return t.run(ctx)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
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
	if err != nil {
		return fmt.Errorf("registering built-in metrics: %w", err)
	}
	return nil
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
	return time.Since(t.start)
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
func (t *testRun) logException(err error, sc *Scenario) {
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

// load parses and links the script and its static imports.
func (t *testRun) load() error {
	abs, err := filepath.Abs(t.cfg.Script)
	if err != nil {
		return exitErrorf(ExitScriptException, "script %q: %v", t.cfg.Script, err)
	}
	t.scriptPath = abs
	t.loader = newLoader(builtinModules())
	rec, err := t.loader.loadFile(abs)
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

func (t *testRun) run(parent context.Context) (retErr error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t.ctx, t.cancel = ctx, cancel
	if err := t.load(); err != nil {
		return err
	}

	// VU 0 reads options and later runs setup, teardown and handleSummary.
	v0, err := t.newVU(ctx, 0)
	if err != nil {
		return scriptError("init", err)
	}
	defer t.loader.vus.Delete(v0.rt)
	rawOpts := []byte("null")
	if o, ok := v0.exports["options"]; ok && !sobek.IsUndefined(o) {
		s, err := jsonStringify(v0.rt, o)
		if err != nil {
			return exitErrorf(ExitInvalidConfig, "options: cannot be converted to JSON: %v", err)
		}
		rawOpts = []byte(s)
	}
	if t.opts, err = ParseOptions(rawOpts, t.cfg.Overrides); err != nil {
		return err
	}
	t.optionsJSON = string(rawOpts)
	for _, sc := range t.opts.Scenarios {
		if _, ok := v0.fns[sc.Exec]; !ok {
			return exitErrorf(ExitInvalidConfig, "scenarios.%s.exec: the script exports no function %q", sc.Name, sc.Exec)
		}
	}
	v0.tags = metrics.NewTags(t.opts.Tags)

	ths, err := metrics.ParseThresholds(t.opts.Thresholds, t.reg)
	if err != nil {
		return &ExitError{Code: ExitInvalidConfig, Err: fmt.Errorf("thresholds: %w", err)}
	}
	outs, err := t.openOutputs()
	if err != nil {
		return err
	}
	t.coll = metrics.NewCollector(t.reg, ths, outs...)
	defer func() {
		if err := t.coll.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("closing outputs: %w", err)
		}
	}()

	if err := t.initScenarios(ctx); err != nil {
		return err
	}
	defer t.releaseVUs()

	// setup
	setupFailed := false
	if fn, ok := v0.fns["setup"]; ok && !t.opts.NoSetup {
		if err := t.runSetup(v0, fn); err != nil {
			return err
		}
	}

	t.start = time.Now()
	t.begun.Store(true)
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	bgWG.Go(func() { t.sampleVUs(bg) })
	bgWG.Go(func() { t.evaluateThresholds(bg) })
	if !t.cfg.Quiet {
		p := newProgress(t)
		bgWG.Go(func() { p.run(bg) })
	}
	var wg sync.WaitGroup
	for _, s := range t.scenarios {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	stopBG()
	bgWG.Wait()
	runDuration := time.Since(t.start)
	if t.cfg.observeRun != nil {
		t.cfg.observeRun(runDuration)
	}
	t.pushVUGauges()

	var phaseErr error
	if fn, ok := v0.fns["teardown"]; ok && !t.opts.NoTeardown && !setupFailed && !t.thAborted.Load() {
		if err := t.runTeardown(v0, fn); err != nil {
			phaseErr = err
		}
	}

	failed, _ := t.coll.Evaluate(runDuration)
	if err := t.writeSummary(v0, runDuration); err != nil && phaseErr == nil {
		phaseErr = err
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
	closeAll := func() {
		for _, o := range outs {
			_ = o.Close()
		}
	}
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
	return outs, nil
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
		s.vus = make([]*vu, sc.initialVUs())
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
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.SetupTimeout)
	defer cancel()
	release := v0.activate(ctx)
	defer release()
	v0.group = "::setup"
	v0.recomputeTags()
	defer func() { v0.group = ""; v0.recomputeTags() }()
	ret, err := v0.callValue(fn)
	if err != nil {
		if t.aborted.Load() {
			return exitErrorf(ExitScriptAborted, "test aborted in setup: %s", t.abortReason)
		}
		if ctx.Err() == context.DeadlineExceeded {
			return exitErrorf(100, "setup() did not finish within setupTimeout (%s)", t.opts.SetupTimeout)
		}
		return scriptError("setup", err)
	}
	if ret != nil && !sobek.IsUndefined(ret) {
		s, err := jsonStringify(v0.rt, ret)
		if err != nil {
			return scriptError("setup: its result cannot be converted to JSON", err)
		}
		t.setupJSON = s
	}
	return nil
}

func (t *testRun) runTeardown(v0 *vu, fn sobek.Callable) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.TeardownTimeout)
	if t.aborted.Load() {
		// the test context is cancelled; teardown still gets its own time
		ctx, cancel = context.WithTimeout(context.WithoutCancel(t.ctx), t.opts.TeardownTimeout)
	}
	defer cancel()
	release := v0.activate(ctx)
	defer release()
	v0.group = "::teardown"
	v0.recomputeTags()
	defer func() { v0.group = ""; v0.recomputeTags() }()
	if err := v0.call(fn, v0.callData()); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return exitErrorf(101, "teardown() did not finish within teardownTimeout (%s)", t.opts.TeardownTimeout)
		}
		return scriptError("teardown", err)
	}
	return nil
}

func (t *testRun) pushVUGauges() {
	now := time.Now()
	tags := metrics.NewTags(t.opts.Tags)
	t.push(
		metrics.Sample{Metric: t.bm.vus, Tags: tags, Time: now, Value: float64(t.vusActive.Load())},
		metrics.Sample{Metric: t.bm.vusMax, Tags: tags, Time: now, Value: float64(t.vusInitialized.Load())},
	)
}

// sampleVUs emits the vus and vus_max gauges every second, as k6 does.
func (t *testRun) sampleVUs(ctx context.Context) {
	t.pushVUGauges()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.pushVUGauges()
		}
	}
}

// evaluateThresholds checks thresholds every 2 s; a failing abortOnFail
// threshold stops the test.
func (t *testRun) evaluateThresholds(ctx context.Context) {
	tick := time.NewTicker(thresholdInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, abort := t.coll.Evaluate(t.elapsed()); abort {
				t.thAborted.Store(true)
				t.logger.Error("thresholds with abortOnFail were crossed; stopping the test")
				t.cancel(errors.New("thresholds crossed"))
				return
			}
		}
	}
}

// thresholdInterval is how often thresholds are evaluated during the run.
var thresholdInterval = 2 * time.Second

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// contextWithTimeout gives end-of-test work its own deadline that a
// cancelled test context (abort) does not cut short.
func contextWithTimeout(t *testRun, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(t.ctx), d)
}
