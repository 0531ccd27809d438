package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/options"
	"github.com/kvstrand/mocker/internal/recent"
)

// vu is one virtual user: a runtime with the script evaluated in it, plus
// the execution state k6/execution reports.
type vu struct {
	t      *testRun
	id     uint64
	rt     *sobek.Runtime
	loop   *eventLoop
	timers *timers

	ctx    context.Context
	inInit bool

	// exports of the main module
	exports map[string]sobek.Value
	fns     map[string]sobek.Callable

	// execution state
	sc               *scenarioRun
	iterInScenario   int64
	iterInInstance   int64
	scenarioIterBase int64 // exec.scenario.iterationInTest of the current iteration
	group            string
	customTags       map[string]string
	baseTags         metrics.Tags
	tags             metrics.Tags
	envObjs          map[string]*sobek.Object
	setupData        sobek.Value
	setupDataReady   bool
	checkCache       map[checkKey]checkEntry
	checkArg         [1]sobek.Value // check's argument to a condition
	inCheck          bool           // checkArg is in use
	iterArg          [1]sobek.Value // runIteration's argument to exec
	samples          [2]metrics.Sample
	// iterFailed: the last iteration's call ended in an error, which may
	// have left work (callbacks dropped by the event loop's reset, such
	// as an unawaited request) bound to the VU's context.
	iterFailed bool

	rng    *rand.PCG                 // Math.random's source
	merged map[mergeKey]metrics.Tags // PushTagged's merges of v.tags with extra tags
	// recentMerges are PushTagged's last merges, looked up before
	// merged: a plugin pushing one request's samples goes back and forth
	// between a couple of tag sets.
	recentMerges recent.Eight[mergeKey, metrics.Tags]
	waitHooks    []func() // WhenWaiting

	imu    sync.Mutex // orders interrupts against activation changes
	genInt uint64
	// selfInterrupted: the JS interrupted itself (exec.test.abort) in this
	// activation; the cancellation that follows must not overwrite it.
	selfInterrupted bool
}

type checkKey struct{ group, name string }

var errInterrupted = errors.New("iteration interrupted")

// abortError is the interrupt value of exec.test.abort().
type abortError struct{ reason string }

func (e *abortError) Error() string { return "test aborted: " + e.reason }

// isAbort reports whether err is this VU's own exec.test.abort().
func isAbort(err error) bool {
	var ie *sobek.InterruptedError
	if errors.As(err, &ie) {
		_, ok := ie.Value().(*abortError)
		return ok
	}
	var ae *abortError
	return errors.As(err, &ae)
}

func (v *vu) Runtime() *sobek.Runtime     { return v.rt }
func (v *vu) Context() context.Context    { return v.ctx }
func (v *vu) ID() uint64                  { return v.id }
func (v *vu) InInit() bool                { return v.inInit }
func (v *vu) Registry() *metrics.Registry { return v.t.reg }
func (v *vu) Tags() metrics.Tags          { return v.tags }
func (v *vu) Run() RunContext             { return v.t }
func (v *vu) Clock() Clock                { return v.t.clock }

func (v *vu) WhenWaiting(f func()) { v.waitHooks = append(v.waitHooks, f) }

// waiting runs the WhenWaiting hooks: the VU is about to wait.
func (v *vu) waiting() {
	for len(v.waitHooks) > 0 {
		hooks := v.waitHooks
		v.waitHooks = nil
		for _, f := range hooks {
			f()
		}
	}
}

func (v *vu) RegisterCallback() func(func() error) { return v.loop.registerCallback() }

func (v *vu) Push(m *metrics.Metric, value float64, extra map[string]string) {
	if v.inInit || v.ctx.Err() != nil || m == nil {
		return
	}
	tags := v.tags
	if len(extra) > 0 {
		keys := make([]string, 0, len(extra))
		for k := range extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tags = tags.With(k, extra[k])
		}
	}
	v.t.push(metrics.Sample{Metric: m, Tags: tags, Time: v.t.clock.Now(), Value: value})
}

// mergeKey names one merge of the VU's tags with extra tags by identity:
// a tag set is immutable, and the VU's changes only when its scenario,
// group or custom tags do.
type mergeKey struct{ base, extra metrics.TagsID }

// maxMerged bounds PushTagged's cache; it starts over when full.
const maxMerged = 256

func (v *vu) PushTagged(m *metrics.Metric, value float64, extra metrics.Tags) {
	if v.inInit || v.ctx.Err() != nil || m == nil {
		return
	}
	tags := v.tags
	if extra.Len() > 0 {
		tags = v.mergedWith(extra)
	}
	v.t.push(metrics.Sample{Metric: m, Tags: tags, Time: v.t.clock.Now(), Value: value})
}

// mergedWith is v.tags with extra set over them, merged once per pair of
// sets (extra is not empty, so no key is the zero key).
func (v *vu) mergedWith(extra metrics.Tags) metrics.Tags {
	key := mergeKey{v.tags.ID(), extra.ID()}
	if tags, ok := v.recentMerges.Get(key); ok {
		return tags
	}
	tags, ok := v.merged[key]
	if !ok {
		if v.merged == nil || len(v.merged) >= maxMerged {
			v.merged = make(map[mergeKey]metrics.Tags)
		}
		tags = v.tags.Merge(extra)
		v.merged[key] = tags
	}
	v.recentMerges.Put(key, tags)
	return tags
}

// newVU creates a runtime and evaluates the script's init context in it.
func (t *testRun) newVU(ctx context.Context, id uint64) (*vu, error) {
	v, err := t.makeVU(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := v.init(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// makeVU creates a VU's runtime with the globals set, ready to evaluate the
// script.
func (t *testRun) makeVU(ctx context.Context, id uint64) (*vu, error) {
	rt := sobek.New()
	rt.SetFieldNameMapper(sobek.TagFieldNameMapper("js", true))
	v := &vu{
		t: t, id: id, rt: rt, loop: newEventLoop(t.clock), ctx: ctx, inInit: true,
		fns: map[string]sobek.Callable{}, envObjs: map[string]*sobek.Object{},
		checkCache: map[checkKey]checkEntry{},
	}
	v.timers = newTimers(v, t.clock)
	v.loop.onReset = v.timers.reset
	v.loop.onWait = v.waiting
	v.tags = metrics.NewTags(t.opts0Tags())
	v.baseTags = v.tags
	// Math.random is seeded per VU: from the time on the wall clock, from
	// --random-seed (or options.randomSeed) when given, and from 0 on a
	// virtual clock, where the same script must give the same run.
	var seed uint64
	switch {
	case t.randomSeed != nil:
		seed = uint64(*t.randomSeed)
	case t.clock.Virtual():
		seed = 0
	default:
		seed = uint64(time.Now().UnixNano())
	}
	v.rng = rand.NewPCG(seed^id*0x9E3779B97F4A7C15, id)
	rt.SetRandSource(rand.New(v.rng).Float64)
	rt.SetTimeSource(t.clock.Now)
	t.loader.vus.Store(rt, v)
	if err := v.setGlobals(); err != nil {
		t.loader.vus.Delete(rt)
		return nil, err
	}
	return v, nil
}

// init evaluates the script's init context in the VU.
func (v *vu) init(ctx context.Context) error {
	if err := v.evaluate(ctx); err != nil {
		v.t.loader.vus.Delete(v.rt)
		return err
	}
	v.inInit = false
	return nil
}

func (v *vu) setGlobals() error {
	rt := v.rt
	g := rt.GlobalObject()
	// Getters in sobek's native signature: a plain Go func would be
	// called through reflection on every read.
	vuGetter := func(sobek.FunctionCall) sobek.Value { return rt.ToValue(v.id) }
	if err := g.DefineAccessorProperty("__VU", rt.ToValue(vuGetter), nil, sobek.FLAG_FALSE, sobek.FLAG_TRUE); err != nil {
		return err
	}
	iterGetter := func(sobek.FunctionCall) sobek.Value { return rt.ToValue(v.iterInScenario) }
	if err := g.DefineAccessorProperty("__ITER", rt.ToValue(iterGetter), nil, sobek.FLAG_FALSE, sobek.FLAG_TRUE); err != nil {
		return err
	}
	if err := rt.Set("__ENV", v.envObject(nil)); err != nil {
		return err
	}
	if err := rt.Set("open", v.open); err != nil {
		return err
	}
	for name, fn := range v.timers.exports() {
		if err := rt.Set(name, fn); err != nil {
			return err
		}
	}
	return rt.Set("console", v.console())
}

// envObject builds __ENV: the -e variables with the scenario's env over
// them. Objects are cached per scenario so activation does not allocate.
func (v *vu) envObject(sc *options.Scenario) *sobek.Object {
	key := ""
	if sc != nil && len(sc.Env) > 0 {
		key = sc.Name
	}
	if o, ok := v.envObjs[key]; ok {
		return o
	}
	o := v.rt.NewObject()
	merged := map[string]string{}
	for k, val := range v.t.env {
		merged[k] = val
	}
	if key != "" {
		for k, val := range sc.Env {
			merged[k] = val
		}
	}
	for k, val := range merged {
		_ = o.Set(k, val)
	}
	v.envObjs[key] = o
	return o
}

// open reads a file relative to the module calling it; init context only.
func (v *vu) open(call sobek.FunctionCall) sobek.Value {
	rt := v.rt
	if !v.inInit {
		panic(rt.NewGoError(errors.New("open() is only available in the init context (top-level code)")))
	}
	name := call.Argument(0).String()
	base := v.t.scriptPath
	if rec, ok := rt.GetActiveScriptOrModule().(sobek.ModuleRecord); ok {
		if p, ok := v.t.loader.pathOf(rec); ok {
			base = p
		}
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(base), name)
	}
	data, err := v.t.readFile(path)
	if err != nil {
		panic(rt.NewGoError(fmt.Errorf("open(%q): %w", name, err)))
	}
	if mode := call.Argument(1); !sobek.IsUndefined(mode) && mode.String() == "b" {
		return rt.ToValue(rt.NewArrayBuffer(append([]byte(nil), data...)))
	}
	return rt.ToValue(string(data))
}

func (v *vu) console() *sobek.Object {
	o := v.rt.NewObject()
	logf := func(level string) func(sobek.FunctionCall) sobek.Value {
		return func(call sobek.FunctionCall) sobek.Value {
			parts := make([]string, len(call.Arguments))
			for i, a := range call.Arguments {
				parts[i] = inspect(v.rt, a)
			}
			v.t.logLine(level, strings.Join(parts, " "))
			return sobek.Undefined()
		}
	}
	for _, name := range []string{"log", "info", "debug", "warn", "error"} {
		level := name
		if name == "log" {
			level = "info"
		}
		_ = o.Set(name, logf(level))
	}
	return o
}

func jsonStringify(rt *sobek.Runtime, val sobek.Value) (string, error) {
	jsonObj := rt.GlobalObject().Get("JSON").ToObject(rt)
	stringify, _ := sobek.AssertFunction(jsonObj.Get("stringify"))
	res, err := stringify(jsonObj, val)
	if err != nil {
		return "", err
	}
	if sobek.IsUndefined(res) {
		return "", nil
	}
	return res.String(), nil
}

func jsonParse(rt *sobek.Runtime, s string) (sobek.Value, error) {
	jsonObj := rt.GlobalObject().Get("JSON").ToObject(rt)
	parse, _ := sobek.AssertFunction(jsonObj.Get("parse"))
	return parse(jsonObj, rt.ToValue(s))
}

// evaluate runs the main module (the init context) and collects its exports.
func (v *vu) evaluate(ctx context.Context) error {
	rt := v.rt
	stop := context.AfterFunc(ctx, func() { rt.Interrupt(context.Cause(ctx)) })
	defer stop()
	promise := rt.CyclicModuleRecordEvaluate(v.t.main, v.t.loader.resolve)
	if err := v.loop.drain(ctx); err != nil {
		return err
	}
	switch promise.State() {
	case sobek.PromiseStateRejected:
		return promiseError(promise.Result())
	case sobek.PromiseStatePending:
		return errors.New("the script's top-level await never settled")
	}
	inst := rt.GetModuleInstance(v.t.main)
	v.exports = map[string]sobek.Value{}
	for _, name := range v.t.exportNames {
		val := inst.GetBindingValue(name)
		if val == nil {
			continue
		}
		v.exports[name] = val
		if fn, ok := sobek.AssertFunction(val); ok {
			v.fns[name] = fn
		}
	}
	return nil
}

func promiseError(res sobek.Value) error {
	if res == nil {
		return errors.New("promise rejected")
	}
	if err, ok := res.Export().(error); ok {
		return err
	}
	if obj, ok := res.(*sobek.Object); ok {
		if stack := obj.Get("stack"); stack != nil && !sobek.IsUndefined(stack) {
			return errors.New(stack.String())
		}
	}
	return errors.New(res.String())
}

// activate binds the VU to ctx (a scenario's hard deadline, or one
// iteration's context): cancelling it interrupts the running JS.
func (v *vu) activate(ctx context.Context) (release func()) {
	v.imu.Lock()
	v.genInt++
	gen := v.genInt
	v.rt.ClearInterrupt()
	v.selfInterrupted = false
	v.ctx = ctx
	v.imu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		v.imu.Lock()
		if v.genInt == gen && !v.selfInterrupted {
			v.rt.Interrupt(errInterrupted)
		}
		v.imu.Unlock()
	})
	return func() {
		stop()
		v.imu.Lock()
		v.genInt++
		v.imu.Unlock()
	}
}

// rearm readies the VU for another iteration in the context it is
// active in, as activate would for a new one: no interrupt left over from
// the last iteration (an exec.test.abort) stops the next one at its
// start. The activation's watcher stays as it is.
func (v *vu) rearm() {
	v.imu.Lock()
	v.rt.ClearInterrupt()
	v.selfInterrupted = false
	v.imu.Unlock()
}

// interruptSelf interrupts the running JS with val (exec.test.abort): the
// activation's context watcher then leaves the interrupt as it is.
func (v *vu) interruptSelf(val any) {
	v.imu.Lock()
	defer v.imu.Unlock()
	v.selfInterrupted = true
	v.rt.Interrupt(val)
}

// interruptIfActive interrupts the running JS now, as the activation's
// context watcher will; for native functions that return early because
// the context ended.
func (v *vu) interruptIfActive() {
	v.imu.Lock()
	defer v.imu.Unlock()
	if v.ctx.Err() != nil && !v.selfInterrupted {
		v.rt.Interrupt(errInterrupted)
	}
}

// enterScenario prepares tags, __ENV and counters for sc.
func (v *vu) enterScenario(sc *scenarioRun) {
	v.sc = sc
	v.iterInScenario = 0
	v.group = ""
	v.baseTags = sc.tags
	clear(v.checkCache)
	v.recomputeTags()
	_ = v.rt.Set("__ENV", v.envObject(sc.cfg))
}

func (v *vu) recomputeTags() {
	t := v.baseTags.Merge(metrics.NewTags(v.customTags))
	v.tags = t.With("group", v.group)
}

// callData returns setup()'s result decoded in this VU's runtime, once.
func (v *vu) callData() sobek.Value {
	if !v.setupDataReady {
		v.setupDataReady = true
		v.setupData = sobek.Undefined()
		if v.t.setupJSON != "" {
			if val, err := jsonParse(v.rt, v.t.setupJSON); err == nil {
				v.setupData = val
			}
		}
	}
	return v.setupData
}

// iterationResult says how one run of the exec function ended.
type iterationResult int

const (
	iterCompleted   iterationResult = iota // ran to the end, possibly by throwing
	iterInterrupted                        // cut short by a deadline or an abort
)

// runIteration runs the scenario's exec function once and emits the
// iteration metrics for a completed run.
func (v *vu) runIteration(fn sobek.Callable) iterationResult {
	t := v.t
	start := t.clock.Now()
	v.scenarioIterBase = v.sc.iterInTest.Add(1) - 1
	// The exec function's one argument goes in a buffer on the VU, not
	// in a slice per iteration: sobek copies a JS function's arguments
	// onto its own stack, and a VU runs one iteration at a time.
	v.iterArg[0] = v.callData()
	err := v.call(fn, v.iterArg[:]...)
	v.iterFailed = err != nil
	v.iterInScenario++
	v.iterInInstance++
	// An iteration whose context ended while it ran is interrupted even if
	// the JS returned first (e.g. sleep() woke up on the cancellation). The
	// iteration that called exec.test.abort() is the exception: k6 counts
	// it, since it ended on its own before the test was stopped.
	if v.ctx.Err() != nil && !isAbort(err) {
		v.loop.reset()
		t.iterationsInterrupted.Add(1)
		return iterInterrupted
	}
	if err != nil && !isAbort(err) {
		t.logException(err, v.sc.cfg)
	}
	end := t.clock.Now()
	if min := t.opts.MinIterationDuration; min > 0 && end.Sub(start) < min {
		// k6's minIterationDuration: the iteration lasts at least that.
		v.waiting()
		t.clock.Sleep(v.ctx, min-end.Sub(start))
		end = t.clock.Now()
	}
	if end.Equal(start) && t.vclock != nil {
		// An iteration that never waited on the clock took no virtual
		// time; the next one starts at the clock's next instant, or a VU
		// that never waits would hold time (and the run) still for ever.
		t.warnZeroIteration()
		t.clock.yield(v.ctx)
	}
	t.iterationsCompleted.Add(1)
	v.samples[0] = metrics.Sample{Metric: t.bm.iterations, Tags: v.tags, Time: end, Value: 1}
	v.samples[1] = metrics.Sample{Metric: t.bm.iterationDuration, Tags: v.tags, Time: end, Value: float64(end.Sub(start)) / float64(time.Millisecond)}
	t.push(v.samples[:]...)
	return iterCompleted
}

// call runs fn with the event loop: first the call itself, then queued
// callbacks, then the returned promise's outcome for async functions.
func (v *vu) call(fn sobek.Callable, args ...sobek.Value) error {
	ret, err := fn(sobek.Undefined(), args...)
	if err != nil {
		v.loop.reset()
		return err
	}
	if err := v.loop.drain(v.ctx); err != nil {
		v.loop.reset()
		return err
	}
	if ret != nil {
		if p, ok := ret.Export().(*sobek.Promise); ok {
			switch p.State() {
			case sobek.PromiseStateRejected:
				return fmt.Errorf("uncaught (in promise): %w", promiseError(p.Result()))
			case sobek.PromiseStatePending:
				if v.ctx.Err() != nil {
					return v.ctx.Err()
				}
			}
		}
	}
	return nil
}

// callValue is call for setup and handleSummary, which need the result.
func (v *vu) callValue(fn sobek.Callable, args ...sobek.Value) (sobek.Value, error) {
	ret, err := fn(sobek.Undefined(), args...)
	if err != nil {
		v.loop.reset()
		return nil, err
	}
	if err := v.loop.drain(v.ctx); err != nil {
		v.loop.reset()
		return nil, err
	}
	if ret != nil {
		if p, ok := ret.Export().(*sobek.Promise); ok {
			switch p.State() {
			case sobek.PromiseStateRejected:
				return nil, fmt.Errorf("uncaught (in promise): %w", promiseError(p.Result()))
			case sobek.PromiseStateFulfilled:
				return p.Result(), nil
			default:
				return sobek.Undefined(), nil
			}
		}
	}
	return ret, nil
}

// checkCounter counts one check's passes and fails for the summary's
// root_group.
type checkCounter struct {
	passes, fails atomic.Int64
}

// readFileOnce memoises open() reads across VUs so each file is read once.
type fileCache struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (t *testRun) readFile(path string) ([]byte, error) {
	t.files.mu.Lock()
	defer t.files.mu.Unlock()
	if b, ok := t.files.files[path]; ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t.files.files == nil {
		t.files.files = map[string][]byte{}
	}
	t.files.files[path] = b
	return b, nil
}
