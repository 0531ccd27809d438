package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/options"
)

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
	unwatchStuck := t.watchStuck()
	defer unwatchStuck()

	if err := t.setupPhase(parent, v0); err != nil {
		return err
	}
	t.scenariosPhase(ctx)
	teardownErr := t.teardownPhase(v0)
	unwatchStuck()
	if t.vclock != nil {
		// A paced clock may be up to its slack ahead of the wall clock.
		t.vclock.CatchUp(parent)
	}
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
	stopSweep := context.AfterFunc(parent, t.clock.endedOutside)
	warned := make(chan struct{})
	t.parent, t.warned = parent, warned
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

// enter moves the run to phase p. When the run has been stopped from
// outside, the stop's warning (which says what still runs, by phase) is
// written first: it must name the phase the stop came in, not the one the
// run moved on to because of it.
func (t *testRun) enter(p *runPhase) {
	if t.parent != nil && t.parent.Err() != nil {
		<-t.warned
	}
	t.phase.Store(p)
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
	t.loader.refuse = t.refuseOnVirtualClock
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

// load parses and links the script and its static imports. v0 is the
// primary VU: Go modules are instantiated in its runtime while linking, so
// their export names are known (see goModuleRecord).
func (t *testRun) load(v0 *vu) error {
	t.loader.setPrimary(v0)
	defer t.loader.setPrimary(nil) // later VUs instantiate on their own goroutines
	rec, err := t.loader.loadFile(t.scriptPath)
	if err != nil {
		return t.loadError(exitErrorf(ExitScriptException, "%v", err))
	}
	if err := rec.Link(); err != nil {
		return t.loadError(exitErrorf(ExitScriptException, "linking %s: %v", t.cfg.Script, err))
	}
	cyc, ok := rec.(sobek.CyclicModuleRecord)
	if !ok {
		return exitErrorf(ExitScriptException, "script %s is not an ES module", t.cfg.Script)
	}
	t.main = cyc
	rec.GetExportedNames(func(names []string) { t.exportNames = append([]string(nil), names...) })
	return nil
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
	if err := t.applySegment(); err != nil {
		return err
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
	ths, err := metrics.ParseThresholds(t.thresholdsWithHTTP(), t.reg)
	if err != nil {
		return &ExitError{Code: ExitInvalidConfig, Err: fmt.Errorf("thresholds: %w", err)}
	}
	t.coll = metrics.NewCollector(t.reg, ths, outs...)
	return nil
}

// initScenarios initialises every scenario's starting VUs in parallel.
func (t *testRun) initScenarios(ctx context.Context) error {
	type job struct {
		s   *scenarioRun
		idx int
	}
	var jobs []job
	for _, sc := range t.opts.Scenarios {
		tags := metrics.NewTags(t.opts.Tags).Merge(metrics.NewTags(sc.Tags)).With("scenario", sc.Name)
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

func (t *testRun) releaseVUs() {
	t.loader.vus.Range(func(k, _ any) bool {
		t.loader.vus.Delete(k)
		return true
	})
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
	t.enter(phaseSetup)
	err := t.runSetup(v0, fn)
	if err != nil && parent.Err() != nil {
		// Stopped from outside during setup: as in k6, teardown is
		// skipped (setup did not finish) but the summary is written.
		t.enter(phaseSummary)
		runDuration := t.elapsed()
		t.coll.Evaluate(runDuration)
		_ = t.writeSummary(v0, runDuration)
	}
	return err
}

// runLifecycle binds v0 to ctx for setup() or teardown(), in the group
// they report under; the returned func undoes it.
func (v *vu) runLifecycle(ctx context.Context, group string) (done func()) {
	release := v.activate(ctx)
	v.group = group
	v.recomputeTags()
	return func() {
		v.group = ""
		v.recomputeTags()
		v.waiting()
		release()
	}
}

func (t *testRun) runSetup(v0 *vu, fn sobek.Callable) error {
	ctx, cancel := t.clock.WithTimeout(t.ctx, t.opts.SetupTimeout)
	defer cancel()
	defer v0.runLifecycle(ctx, "::setup")()
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

// scenariosPhase runs every scenario to its end, with the thresholds
// checked and the progress shown beside them.
func (t *testRun) scenariosPhase(ctx context.Context) {
	t.enter(phaseScenarios)
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
	t.enter(phaseTeardown)
	return t.runTeardown(v0, fn)
}

func (t *testRun) runTeardown(v0 *vu, fn sobek.Callable) error {
	ctx, cancel := contextWithTimeout(t, t.opts.TeardownTimeout)
	defer cancel()
	defer v0.runLifecycle(ctx, "::teardown")()
	if err := v0.call(fn, v0.callData()); err != nil {
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return exitErrorf(ExitTeardownTimeout, "teardown() did not finish within teardownTimeout (%s)", t.opts.TeardownTimeout)
		}
		return scriptError("teardown", err)
	}
	return nil
}

// summaryPhase evaluates the thresholds, writes the summary and returns
// the run's outcome; phaseErr is what teardown returned.
func (t *testRun) summaryPhase(v0 *vu, phaseErr error) error {
	t.enter(phaseSummary)
	runDuration := t.elapsed()
	failed, _ := t.coll.Evaluate(runDuration)
	if err := t.writeSummary(v0, runDuration); err != nil && phaseErr == nil {
		phaseErr = err
	}
	if t.vclock != nil && t.vclock.Paced() {
		t.reportPace(runDuration)
	} else if t.vclock != nil {
		wall := time.Since(t.wallStart)
		t.logger.Info(fmt.Sprintf("virtual clock: ran %s of script time in %s of wall time (%s)",
			runDuration.Round(time.Millisecond), wall.Round(time.Millisecond), t.speedFactor()))
	}
	return t.finalError(phaseErr, failed)
}

// reportPace warns when a paced clock fell behind the wall clock by over a
// tenth of the run: the run then took longer than its script says (its
// results are unaffected).
func (t *testRun) reportPace(runDuration time.Duration) {
	_, peak := t.vclock.Lag()
	if peak > 0 && peak*10 > runDuration {
		t.logger.Warn(fmt.Sprintf("the host fell behind the paced clock by up to %s (over 10%% of the run's %s): the run took longer than its script says; its results are unaffected. Run with less load beside it, or use --clock virtual",
			peak.Round(time.Millisecond), runDuration.Round(time.Millisecond)))
	}
}

// warnZeroIteration says once that iterations take no virtual time.
func (t *testRun) warnZeroIteration() {
	t.zeroWarned.Do(func() {
		t.logger.Warn("an iteration took no script time (it never slept or waited on a plugin): on a paced or virtual clock the time JavaScript takes is not counted, and the next iteration starts a microsecond of script time later; give iterations a think time with sleep(), or run with --clock wall")
	})
}

// watchStuck has a paced or virtual clock count the time of a VU stuck in
// JavaScript as wall time (VirtualClock.watchStuck), and says so once.
// The returned func ends the watch; calling it again does nothing.
func (t *testRun) watchStuck() func() {
	if t.vclock == nil {
		return func() {}
	}
	var once sync.Once
	return t.vclock.watchStuck(func() {
		once.Do(func() {
			t.logger.Warn(fmt.Sprintf("a VU has run JavaScript for over %s without waiting on the clock: until it waits, the paced or virtual clock moves with the wall clock, so the scenario's duration, gracefulStop or maxDuration can end it", stuckAfter))
		})
	})
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
