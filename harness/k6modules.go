package harness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
)

// builtinModules are the k6 modules every script can import.
func builtinModules() map[string]Module {
	return map[string]Module{
		"k6":           ModuleFunc(newK6Module),
		"k6/metrics":   ModuleFunc(newMetricsModule),
		"k6/execution": ModuleFunc(newExecutionModule),
		"k6/timers":    ModuleFunc(newTimersModule),
		"k6/encoding":  ModuleFunc(newEncodingModule),
		"k6/crypto":    ModuleFunc(newCryptoModule),
		"k6/data":      ModuleFunc(newDataModule),
		"k6/http":      ModuleFunc(newHTTPModule),
		"k6/x/sse":     ModuleFunc(newSSEModule),
		// The community extension's API, under the name k6 gives its
		// experimental modules.
		"k6/experimental/sse": ModuleFunc(newSSEModule),
	}
}

func throwf(rt *sobek.Runtime, format string, args ...any) {
	errCtor := rt.Get("Error")
	obj, err := rt.New(errCtor, rt.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		panic(rt.NewGoError(fmt.Errorf(format, args...)))
	}
	panic(obj)
}

func newK6Module(h VU) ModuleInstance {
	v := h.(*vu)
	rt := v.rt
	named := map[string]any{
		"check": v.check,
		"group": v.groupCall,
		"sleep": v.jsSleep,
		"fail":  func(msg sobek.Value) { throwf(rt, "%s", valueString(msg)) },
		"randomSeed": func(seed int64) {
			rt.SetRandSource(rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x5851F42D4C957F2D)).Float64)
		},
	}
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

func valueString(val sobek.Value) string {
	if val == nil || sobek.IsUndefined(val) {
		return ""
	}
	return val.String()
}

// check evaluates each named condition, emits one `checks` sample per name
// and returns whether all passed.
func (v *vu) check(call sobek.FunctionCall) sobek.Value {
	rt := v.rt
	if v.inInit {
		throwf(rt, "check() is not allowed in the init context")
	}
	val := call.Argument(0)
	setsArg := call.Argument(1)
	if sobek.IsUndefined(setsArg) || sobek.IsNull(setsArg) {
		return rt.ToValue(true)
	}
	sets := setsArg.ToObject(rt)
	var extra map[string]string
	if t := call.Argument(2); !sobek.IsUndefined(t) && !sobek.IsNull(t) {
		extra = map[string]string{}
		obj := t.ToObject(rt)
		for _, k := range obj.Keys() {
			extra[k] = obj.Get(k).String()
		}
	}
	all := true
	now := v.t.clock.Now()
	// A condition's argument goes in the VU's buffer rather than in a
	// slice per call, and is set again before each call. A check called
	// from inside a condition (a native one could still read the
	// buffer) gets a slice of its own.
	args := v.checkArg[:]
	if v.inCheck {
		args = []sobek.Value{nil}
	} else {
		v.inCheck = true
		defer func() {
			v.inCheck = false
			v.checkArg[0] = nil
		}()
	}
	for _, name := range sets.Keys() {
		if strings.Contains(name, "::") {
			throwf(rt, "check name %q must not contain '::'", name)
		}
		cond := sets.Get(name)
		ok := false
		if fn, isFn := sobek.AssertFunction(cond); isFn {
			args[0] = val
			res, err := fn(sobek.Undefined(), args...)
			if err != nil {
				panic(err)
			}
			if p, isP := res.Export().(*sobek.Promise); isP && p != nil {
				throwf(rt, "check %q: async check functions are not supported", name)
			}
			ok = res.ToBoolean()
		} else {
			ok = cond.ToBoolean()
		}
		if !ok {
			all = false
		}
		entry := v.checkEntry(name)
		tags := entry.tags
		for k, val := range extra {
			tags = tags.With(k, val)
		}
		value := 0.0
		if ok {
			value = 1
			entry.counter.passes.Add(1)
		} else {
			entry.counter.fails.Add(1)
		}
		if v.ctx.Err() == nil {
			v.t.push(metrics.Sample{Metric: v.t.bm.checks, Tags: tags, Time: now, Value: value})
		}
	}
	return rt.ToValue(all)
}

type checkEntry struct {
	counter *checkCounter
	tags    metrics.Tags
}

func (v *vu) checkEntry(name string) checkEntry {
	key := checkKey{group: v.group, name: name}
	if e, ok := v.checkCache[key]; ok {
		return e
	}
	e := checkEntry{counter: v.t.groups.check(v.group, name), tags: v.tags.With("check", name)}
	v.checkCache[key] = e
	return e
}

// groupCall runs fn inside a named group: the group tag becomes
// "::outer::name" while fn runs, and group_duration is emitted.
func (v *vu) groupCall(name string, fn sobek.Callable) sobek.Value {
	rt := v.rt
	if v.inInit {
		throwf(rt, "group() is not allowed in the init context")
	}
	if strings.Contains(name, "::") {
		throwf(rt, "group name %q must not contain '::'", name)
	}
	if fn == nil {
		throwf(rt, "group %q: the second argument must be a function", name)
	}
	outer := v.group
	v.group = outer + "::" + name
	v.t.groups.group(v.group)
	v.recomputeTags()
	start := v.t.clock.Now()
	res, err := fn(sobek.Undefined())
	end := v.t.clock.Now()
	tags := v.tags
	v.group = outer
	v.recomputeTags()
	// The duration counts whether or not fn threw, as in k6.
	if v.ctx.Err() == nil {
		v.t.push(metrics.Sample{Metric: v.t.bm.groupDuration, Tags: tags, Time: end, Value: float64(end.Sub(start)) / float64(time.Millisecond)})
	}
	if err != nil {
		panic(err)
	}
	if p, ok := res.Export().(*sobek.Promise); ok && p != nil {
		throwf(rt, "group %q: async functions are not supported in group()", name)
	}
	return res
}

// jsSleep is sleep(secs) in sobek's native signature, which spares the
// reflection a func(float64) is called through; it converts its argument
// as that wrapper does (missing: 0; not a number: the same TypeError).
func (v *vu) jsSleep(call sobek.FunctionCall) sobek.Value {
	var secs float64
	if len(call.Arguments) > 0 {
		if err := v.rt.ExportTo(call.Arguments[0], &secs); err != nil {
			panic(v.rt.NewTypeError("could not convert function call parameter %d: %v", 0, err))
		}
	}
	v.sleep(secs)
	return sobek.Undefined()
}

// sleep pauses the VU; it returns early when the VU's context ends so that
// a stopping test is not held up by sleeping VUs.
func (v *vu) sleep(secs float64) {
	if secs <= 0 || math.IsNaN(secs) {
		return
	}
	d := time.Duration(secs * float64(time.Second))
	v.waiting()
	if !v.t.clock.Sleep(v.ctx, d) {
		// The script must not go on as if it had slept: stop it here
		// rather than when the context's interrupt lands.
		v.interruptIfActive()
	}
}

// newMetricsModule implements k6/metrics: Counter, Gauge, Rate, Trend.
func newMetricsModule(h VU) ModuleInstance {
	v := h.(*vu)
	named := map[string]any{
		"Counter": v.metricConstructor(metrics.Counter),
		"Gauge":   v.metricConstructor(metrics.Gauge),
		"Rate":    v.metricConstructor(metrics.Rate),
		"Trend":   v.metricConstructor(metrics.Trend),
	}
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}

func (v *vu) metricConstructor(mt metrics.MetricType) func(sobek.ConstructorCall) *sobek.Object {
	return func(call sobek.ConstructorCall) *sobek.Object {
		rt := v.rt
		if !v.inInit {
			throwf(rt, "metrics must be declared in the init context (top-level code)")
		}
		name := call.Argument(0).String()
		vt := metrics.Default
		if call.Argument(1).ToBoolean() {
			vt = metrics.Time
		}
		m, err := v.t.reg.Register(name, mt, vt)
		if err != nil {
			throwf(rt, "new %s(%q): %v", mt, name, err)
		}
		obj := call.This
		_ = obj.Set("name", name)
		_ = obj.Set("add", func(c sobek.FunctionCall) sobek.Value { return v.metricAdd(m, c) })
		return nil
	}
}

func (v *vu) metricAdd(m *metrics.Metric, call sobek.FunctionCall) sobek.Value {
	rt := v.rt
	if v.inInit {
		throwf(rt, "%s.add() cannot be called in the init context", m.Name)
	}
	arg := call.Argument(0)
	if sobek.IsUndefined(arg) || sobek.IsNull(arg) {
		v.t.logLine("warn", fmt.Sprintf("%s.add(%s): no value was given; sample dropped", m.Name, valueString(arg)))
		return rt.ToValue(false)
	}
	// Number conversion as in JS (and k6): numeric strings count, booleans
	// are 1 and 0, anything else is NaN.
	value := arg.ToFloat()
	if math.IsNaN(value) {
		v.t.logLine("warn", fmt.Sprintf("%s.add(%s): value is not a number; sample dropped", m.Name, valueString(arg)))
		return rt.ToValue(false)
	}
	tags := v.tags
	if t := call.Argument(1); !sobek.IsUndefined(t) && !sobek.IsNull(t) {
		obj := t.ToObject(rt)
		for _, k := range obj.Keys() {
			tags = tags.With(k, obj.Get(k).String())
		}
	}
	if v.ctx.Err() == nil {
		v.t.push(metrics.Sample{Metric: m, Tags: tags, Time: v.t.clock.Now(), Value: value})
	}
	return rt.ToValue(true)
}

// newExecutionModule implements k6/execution.
func newExecutionModule(h VU) ModuleInstance {
	v := h.(*vu)
	rt := v.rt
	t := v.t
	def := rt.NewObject()
	getter := func(obj *sobek.Object, name string, allowInit bool, fn func() any) {
		_ = obj.DefineAccessorProperty(name, rt.ToValue(func(sobek.FunctionCall) sobek.Value {
			if v.inInit && !allowInit {
				throwf(rt, "exec.%s is not available in the init context", name)
			}
			return rt.ToValue(fn())
		}), nil, sobek.FLAG_FALSE, sobek.FLAG_TRUE)
	}

	scenario := rt.NewObject()
	getter(scenario, "name", false, func() any { return v.scenarioField(func(s *scenarioRun) any { return s.cfg.Name }) })
	getter(scenario, "executor", false, func() any { return v.scenarioField(func(s *scenarioRun) any { return s.cfg.Executor }) })
	getter(scenario, "startTime", false, func() any {
		return v.scenarioField(func(s *scenarioRun) any { return s.startedAt.UnixMilli() })
	})
	getter(scenario, "progress", false, func() any { return v.scenarioField(func(s *scenarioRun) any { return s.progress() }) })
	getter(scenario, "iterationInInstance", false, func() any { return v.scenarioIterBase })
	getter(scenario, "iterationInTest", false, func() any { return v.scenarioIterBase })

	vuObj := rt.NewObject()
	getter(vuObj, "idInInstance", false, func() any { return v.id })
	getter(vuObj, "idInTest", false, func() any { return v.id })
	getter(vuObj, "iterationInInstance", false, func() any { return v.iterInInstance })
	getter(vuObj, "iterationInScenario", false, func() any { return v.iterInScenario })
	tagsObj := rt.NewDynamicObject(&vuTags{v: v})
	_ = vuObj.Set("tags", tagsObj)
	metricsObj := rt.NewObject()
	_ = metricsObj.Set("tags", tagsObj)
	_ = metricsObj.Set("metadata", rt.NewObject())
	_ = vuObj.Set("metrics", metricsObj)

	instance := rt.NewObject()
	getter(instance, "iterationsCompleted", false, func() any { return t.iterationsCompleted.Load() })
	getter(instance, "iterationsInterrupted", false, func() any { return t.iterationsInterrupted.Load() })
	getter(instance, "vusActive", false, func() any { return t.vusActive.Load() })
	getter(instance, "vusInitialized", false, func() any { return t.vusInitialized.Load() })
	getter(instance, "currentTestRunDuration", false, func() any { return float64(t.elapsed()) / float64(time.Millisecond) })

	test := rt.NewObject()
	_ = test.Set("abort", func(call sobek.FunctionCall) sobek.Value {
		reason := valueString(call.Argument(0))
		// The VU's own interrupt comes first and stays: the test's
		// cancellation must not overwrite it with an "interrupted"
		// (which would not count the iteration, as k6 does).
		v.interruptSelf(&abortError{reason: reason})
		t.abort(reason)
		return sobek.Undefined()
	})
	_ = test.Set("fail", func(call sobek.FunctionCall) sobek.Value {
		t.markFailed(valueString(call.Argument(0)))
		return sobek.Undefined()
	})
	getter(test, "options", true, func() any {
		if t.optionsJSON == "" {
			return rt.NewObject()
		}
		val, err := jsonParse(rt, t.optionsJSON)
		if err != nil {
			return rt.NewObject()
		}
		return val
	})

	_ = def.Set("scenario", scenario)
	_ = def.Set("vu", vuObj)
	_ = def.Set("instance", instance)
	_ = def.Set("test", test)
	return ExportsFunc(func() Exports { return Exports{Default: def} })
}

func (v *vu) scenarioField(f func(*scenarioRun) any) any {
	if v.sc == nil {
		return nil
	}
	return f(v.sc)
}

// vuTags backs exec.vu.metrics.tags: reads see the VU's current tags,
// writes add tags to every later sample of this VU.
type vuTags struct{ v *vu }

func (d *vuTags) Get(key string) sobek.Value {
	if val, ok := d.v.tags.Get(key); ok {
		return d.v.rt.ToValue(val)
	}
	return nil
}

func (d *vuTags) Set(key string, val sobek.Value) bool {
	switch val.Export().(type) {
	case string, int64, float64, bool:
	default:
		throwf(d.v.rt, "exec.vu.metrics.tags[%q]: only strings, numbers and booleans are allowed", key)
	}
	if d.v.customTags == nil {
		d.v.customTags = map[string]string{}
	}
	d.v.customTags[key] = val.String()
	clear(d.v.checkCache)
	d.v.recomputeTags()
	return true
}

func (d *vuTags) Has(key string) bool { _, ok := d.v.tags.Get(key); return ok }

func (d *vuTags) Delete(key string) bool {
	if _, ok := d.v.customTags[key]; ok {
		delete(d.v.customTags, key)
		clear(d.v.checkCache)
		d.v.recomputeTags()
	}
	return true
}

func (d *vuTags) Keys() []string {
	m := d.v.tags.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// newTimersModule implements k6/timers: the VU's timer functions, the same
// ones the globals setTimeout... are.
func newTimersModule(h VU) ModuleInstance {
	named := h.(*vu).timers.exports()
	return ExportsFunc(func() Exports { return Exports{Named: named} })
}
