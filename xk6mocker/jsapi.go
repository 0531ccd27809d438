package xk6mocker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/internal/jsonval"
)

// heldSampleEvery is how often, in wall time, the VUs waiting in generate
// on one cluster sample mocker_kv_held_blocks (one sample per period
// between them).
const heldSampleEvery = 50 * time.Millisecond

// defaultDrainTimeout is drain()'s wait when the script gives none.
const defaultDrainTimeout = 30 * time.Second

// maxDrainMs and maxSleepMs bound drain's wall-time timeout and sleep's
// modeled milliseconds: about 11.6 days each, beyond any test, and with
// cluster.MinSpeedupRatio still inside what a timer holds.
const (
	maxDrainMs = 1e9
	maxSleepMs = cluster.MaxTimeoutMs
)

// jsCluster implements mocker.cluster(config).
func (inst *instance) jsCluster(call sobek.FunctionCall) sobek.Value {
	rt := inst.rt
	if inst.regErr != nil {
		throw(rt, fmt.Errorf("mocker.cluster: %w", inst.regErr))
	}
	raw := map[string]any{}
	if arg := call.Argument(0); !sobek.IsUndefined(arg) && !sobek.IsNull(arg) {
		m, ok := arg.Export().(map[string]any)
		if !ok {
			throw(rt, fmt.Errorf("mocker.cluster: want a config object such as {engine: 'vllm', disagg: true}, got %s", arg.String()))
		}
		raw = m
	}
	cfg, err := cluster.ConfigFromMap(raw)
	if err != nil {
		throw(rt, fmt.Errorf("mocker.cluster: %w", err))
	}
	e, err := inst.run.cluster(cfg, inst.vu.Clock())
	var exit *harness.ExitError
	if errors.As(err, &exit) {
		// The error sets the run's exit code (the harness unwraps it).
		panic(rt.NewGoError(&harness.ExitError{Code: exit.Code, Err: fmt.Errorf("mocker.cluster: %w", exit.Err)}))
	}
	if err != nil {
		throw(rt, fmt.Errorf("mocker.cluster: %w", err))
	}
	return inst.handle(e)
}

// handle builds the VU's JS object for cluster e.
func (inst *instance) handle(e *entry) *sobek.Object {
	rt := inst.rt
	o := rt.NewObject()
	must(o.Set("name", e.name))
	must(o.Set("generate", func(call sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("cluster.generate")
		req, err := parseRequest(rt, call.Argument(0))
		if err != nil {
			throw(rt, fmt.Errorf("generate: %w", err))
		}
		res := inst.generateBlocking(e, req)
		inst.emit(e, res)
		return resultObject(rt, res, &inst.names)
	}))
	must(o.Set("generateAsync", func(call sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("cluster.generateAsync")
		p, resolve, reject := rt.NewPromise()
		req, err := parseRequest(rt, call.Argument(0))
		if err != nil {
			must(reject(jsError(rt, fmt.Errorf("generateAsync: %w", err))))
			return rt.ToValue(p)
		}
		ctx := inst.vu.Context()
		settle := inst.vu.RegisterCallback()
		if e.stepped {
			inst.submit(e, ctx, req, func(res cluster.Result) {
				settle(func() error {
					inst.emit(e, res)
					return resolve(resultObject(rt, res, &inst.names))
				})
			})
			return rt.ToValue(p)
		}
		go func() {
			res := e.generate(ctx, req)
			settle(func() error {
				inst.emit(e, res)
				return resolve(resultObject(rt, res, &inst.names))
			})
		}()
		return rt.ToValue(p)
	}))
	must(o.Set("stats", func(sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("cluster.stats")
		return statsObject(rt, e.stats(), true, "")
	}))
	must(o.Set("drain", func(call sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("cluster.drain")
		timeout := defaultDrainTimeout
		if arg := call.Argument(0); !sobek.IsUndefined(arg) && !sobek.IsNull(arg) {
			var err error
			if timeout, err = jsonval.Millis("drain: timeoutMs", arg.Export(), jsonval.AboveZero, maxDrainMs); err != nil {
				throw(rt, err)
			}
		}
		inst.resumeTime()
		vuCtx := inst.vu.Context()
		ctx, cancel := inst.vu.Clock().WithTimeout(vuCtx, timeout)
		defer cancel()
		st, err := e.drain(ctx)
		inst.sampleHeld(e, heldNow{st.HeldBlocks, st.PeakHeldBlocks})
		inst.countLost(e, st)
		msg := ""
		if err != nil {
			msg = drainMessage(st, timeout, vuCtx.Err() != nil, err)
		}
		return statsObject(rt, st, err == nil, msg)
	}))
	must(o.Set("sleep", func(call sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("cluster.sleep")
		d, err := jsonval.Millis("sleep", call.Argument(0).Export(), 0, maxSleepMs)
		if err != nil {
			throw(rt, fmt.Errorf("%w (modeled milliseconds)", err))
		}
		inst.sleepModeled(e, float64(d)/float64(time.Millisecond))
		return sobek.Undefined()
	}))
	must(o.Set("speedup_ratio", e.scale.Ratio()))
	if inst.handles == nil {
		inst.handles = map[*sobek.Object]*entry{}
	}
	inst.handles[o] = e
	must(o.Set("holds", func(sobek.FunctionCall) sobek.Value {
		hs := e.holds()
		out := make([]any, len(hs))
		for i, h := range hs {
			out[i] = structObject(rt, reflect.ValueOf(h))
		}
		return rt.NewArray(out...)
	}))
	return o
}

// generateBlocking runs req on another goroutine while the VU goroutine
// waits, sampling the held-blocks gauge as it waits: a saturated cluster
// is exactly when requests take long and the gauge matters.
func (inst *instance) generateBlocking(e *entry, req cluster.Request) cluster.Result {
	ctx := inst.vu.Context()
	if e.stepped {
		// On the virtual clock the VU waits on a gate of the clock; the
		// held-blocks gauge is sampled as each request ends. The VU has
		// one blocking request at a time, and Submit calls back exactly
		// once, so one gate and one callback serve all of them.
		b := &inst.blocking
		if b.gate == nil {
			b.gate = inst.vu.Clock().NewGate()
			b.done = func(r cluster.Result) {
				b.res = r
				b.gate.Open()
			}
		}
		inst.submit(e, ctx, req, b.done)
		b.gate.Wait(context.Background())
		res := b.res
		b.res = cluster.Result{}
		return res
	}
	if e.offTurn != nil {
		// Remote workers under a paced clock: the VU waits outside its
		// turn; the held-blocks gauge is sampled as each request ends.
		var res cluster.Result
		e.outside(func() { res = e.generate(ctx, req) })
		return res
	}
	// On the wall clock the VU pauses the cluster's modeled time from one
	// result to its next step (its next request, or its next wait):
	// the time the host takes over the script's JavaScript is no modeled
	// time, so a closed loop offers the same load however busy the host.
	type held struct {
		res   cluster.Result
		pause cluster.Pause
	}
	prev := inst.pauses[e]
	delete(inst.pauses, e)
	done := make(chan held, 1)
	go func() {
		if e.isClosed() {
			done <- held{res: closedResult(e)}
			return
		}
		if e.faulted() {
			e.c.Resume(prev)
			done <- held{res: e.faultResult(ctx)}
			return
		}
		res, h := e.c.GenerateThenPause(ctx, req, prev)
		done <- held{res, h}
	}()
	// One waiting VU at a time samples the gauge: a ticker per waiting VU
	// would wake the process hundreds of times a second for one sample
	// per period.
	if !e.sampler.CompareAndSwap(false, true) {
		r := <-done
		inst.keepPause(e, r.pause)
		return r.res
	}
	defer e.sampler.Store(false)
	tick := time.NewTicker(heldSampleEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			inst.keepPause(e, r.pause)
			return r.res
		case now := <-tick.C:
			if e.sampleDue(now, heldSampleEvery) {
				inst.sampleHeld(e, e.held())
			}
		}
	}
}

// keepPause keeps h until the VU next waits.
func (inst *instance) keepPause(e *entry, h cluster.Pause) {
	if h == (cluster.Pause{}) {
		return
	}
	if inst.pauses == nil {
		inst.pauses = map[*entry]cluster.Pause{}
	}
	inst.pauses[e] = h
	if !inst.waitHooked {
		inst.waitHooked = true
		inst.vu.WhenWaiting(inst.resumeTime)
	}
}

// resumeTime lets the clusters' modeled time go on: the VU waits.
func (inst *instance) resumeTime() {
	inst.waitHooked = false
	for e, h := range inst.pauses {
		e.c.Resume(h)
	}
	clear(inst.pauses)
}

// submit hands req to a stepped cluster, keyed by this VU and its call
// count so that requests made at one virtual instant always arrive in the
// same order.
func (inst *instance) submit(e *entry, ctx context.Context, req cluster.Request, done func(cluster.Result)) {
	inst.submitAt(e, ctx, req, -1, done)
}

// submitAt is submit for a request that arrives at modeled time atMs
// (cluster.SubmitAt), or, with atMs below 0, at the next Settle.
func (inst *instance) submitAt(e *entry, ctx context.Context, req cluster.Request, atMs float64, done func(cluster.Result)) {
	if e.isClosed() {
		done(closedResult(e))
		return
	}
	if e.faulted() {
		e.deliverFault(ctx, done)
		return
	}
	inst.calls++
	key := cluster.Key{Source: inst.vu.ID(), Seq: inst.calls}
	if atMs < 0 {
		e.c.Submit(ctx, req, key, done)
		return
	}
	e.c.SubmitAt(ctx, req, key, atMs, done)
}

// sleepModeled blocks the VU for ms of the cluster's modeled time, on the
// cluster's own loop (ms / speedup_ratio of wall time while the loop keeps
// up), or until the VU's work must stop.
func (inst *instance) sleepModeled(e *entry, ms float64) {
	if ms <= 0 {
		return
	}
	inst.resumeTime()
	_ = e.sleep(inst.vu.Context(), ms)
}

// accepting reports whether the harness keeps samples pushed now: not in
// the init context, and not once the VU's iteration (or setup, teardown)
// was interrupted.
func (inst *instance) accepting() bool {
	return !inst.vu.InInit() && inst.vu.Context().Err() == nil
}

// sampleHeld pushes one mocker_kv_held_blocks sample from st: the blocks
// held now or, when the cluster reached a new peak since the last sample
// pushed, that peak. Held blocks can rise and fall between two samples;
// carrying the peak makes the gauge's max the cluster's peak_held_blocks
// rather than whatever the sampling happened to catch.
func (inst *instance) sampleHeld(e *entry, st heldNow) {
	if !inst.accepting() {
		return
	}
	if !e.stepped {
		// The periodic samples' shared period (sampleDue), which only
		// clusters on the wall clock take.
		e.lastSample.Store(time.Now().UnixNano())
	}
	v := st.now
	for peak := int64(st.peak); ; {
		last := e.lastPeak.Load()
		if peak <= last {
			break
		}
		if e.lastPeak.CompareAndSwap(last, peak) {
			v = max(v, st.peak)
			break
		}
	}
	inst.vu.PushTagged(inst.m.held, float64(v), inst.tagSet(tagKey{e: e}))
}

// tagKey names one tag set of a cluster's samples: the cluster's own tags,
// plus role and outcome when their has flags say so (a tag may have an
// empty value).
type tagKey struct {
	e                   *entry
	role, outcome       string
	hasRole, hasOutcome bool
}

func (k tagKey) withRole(role string) tagKey {
	k.role, k.hasRole = role, true
	return k
}

func (k tagKey) withOutcome(outcome string) tagKey {
	k.outcome, k.hasOutcome = outcome, true
	return k
}

// maxTagSets bounds an instance's tag sets; the cache starts over when
// full (outcomes come from short lists, so it should not fill).
const maxTagSets = 256

// tagSet is k's tag set, built once per VU and combination: emit pushes a
// dozen samples per request, and a set that keeps its identity lets the
// harness reuse its merge with the VU's tags. Only the VU's goroutine
// calls it.
func (inst *instance) tagSet(k tagKey) metrics.Tags {
	// A request's samples take turns among a few sets: comparing keys
	// with the last few costs less than hashing one.
	if t, ok := inst.recentTags.Get(k); ok {
		return t
	}
	t, ok := inst.tagSets[k]
	if !ok {
		t = inst.newTagSet(k)
	}
	inst.recentTags.Put(k, t)
	return t
}

// newTagSet builds k's tag set and keeps it in the cache.
func (inst *instance) newTagSet(k tagKey) metrics.Tags {
	var kv []string
	if k.hasRole {
		kv = append(kv, "role", k.role)
	}
	if k.hasOutcome {
		kv = append(kv, "outcome", k.outcome)
	}
	if inst.tagSets == nil || len(inst.tagSets) >= maxTagSets {
		inst.tagSets = make(map[tagKey]metrics.Tags)
	}
	t := metrics.NewTags(k.e.tags(kv...))
	inst.tagSets[k] = t
	return t
}

// tags are the tags of every sample about e, plus kv pairs.
func (e *entry) tags(kv ...string) map[string]string {
	m := map[string]string{"cluster": e.name, "engine": e.engine, "router": e.router}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// emit pushes one request's samples; it runs on the VU goroutine. The
// harness drops samples once the VU's iteration was interrupted (a
// gracefulStop that ran out while the request was in flight): such a
// request is left out of the metrics, and the KV handoff summary counts it.
func (inst *instance) emit(e *entry, res cluster.Result) {
	e.observe(res)
	if !inst.accepting() {
		e.dropped.Add(1)
		return
	}
	e.recorded.Add(1)
	tags := inst.tagSet
	push := inst.vu.PushTagged
	m := inst.m
	outcome := res.Outcome
	base := tagKey{e: e}
	plain := tags(base)
	byOutcome := tags(base.withOutcome(outcome))
	prefill := base.withRole("prefill")
	push(m.requests, 1, byOutcome)
	failed := 0.0
	if outcome != cluster.OutcomeCompleted {
		failed = 1
	}
	push(m.requestFailed, failed, plain)
	if res.OutputTokens > 0 {
		push(m.ttft, res.TTFTMs, byOutcome)
	}
	if res.OutputTokens > 1 {
		push(m.itl, res.ITLMs, byOutcome)
	}
	if outcome == cluster.OutcomeCompleted {
		push(m.e2e, res.E2EMs, byOutcome)
	}
	if res.HoldStarted {
		push(m.pins, 1, tags(prefill))
	}
	if res.HoldOutcome != "" {
		push(m.pinDuration, res.HoldMs, tags(prefill.withOutcome(res.HoldOutcome)))
	}
	if pinAborted(res) {
		push(m.aborts, 1, tags(prefill))
	}
	if res.HoldOutcome == "transferred" {
		push(m.transfer, res.TransferMs, plain)
	}
	if wait, ok := decodeWait(res); ok {
		push(m.decodeWait, wait, tags(base.withRole("decode").withOutcome(res.HoldOutcome)))
	}
	if res.PrefillRejected {
		push(m.prefillRejections, 1, tags(prefill))
	}
	lagNow, _ := e.clockLag()
	push(m.lag, float64(lagNow)/float64(time.Millisecond), plain)
	inst.sampleHeld(e, e.held())
}

// countLost pushes to mocker_requests_lost the requests of e whose outcome
// the metrics do not have and that no earlier drain counted: those whose
// samples were dropped with their interrupted iteration, and those still
// in flight after the drain (st). A request in flight now that later ends
// is not counted twice: the count only ever rises to the larger total.
func (inst *instance) countLost(e *entry, st cluster.Stats) {
	if !inst.accepting() {
		return
	}
	lost := e.dropped.Load() + uint64(max(st.InFlight, 0))
	for {
		counted := e.lostCounted.Load()
		if lost <= counted {
			return
		}
		if e.lostCounted.CompareAndSwap(counted, lost) {
			inst.vu.PushTagged(inst.m.lost, float64(lost-counted), inst.tagSet(tagKey{e: e}))
			return
		}
	}
}

// decodeWait is how long res's decode worker waited for its reservation,
// for a request whose hold ended. A transferred hold's decode waited
// DecodeWaitMs. An aborted hold's decode either got its reservation
// (DecodeWaitMs) or waited in vain until the abort: the decode starts
// waiting as the hold starts (source-first), so the hold's duration is that
// wait, give or take the moment between the two.
func decodeWait(res cluster.Result) (float64, bool) {
	switch {
	case res.HoldOutcome == "transferred":
		return res.DecodeWaitMs, true
	case res.HoldOutcome != cluster.OutcomeAborted || res.DecodeWorker == "":
		return 0, false
	case res.DecodeWaitMs > 0:
		return res.DecodeWaitMs, true
	}
	return res.HoldMs, true
}

// drainMessage says in one sentence why drain gave up: what was still in
// flight or on the workers when its wall-time timeout ran out, or that the
// VU's work was stopped first.
func drainMessage(st cluster.Stats, timeout time.Duration, stopped bool, err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		var what string
		if st.InFlight > 0 {
			what = fmt.Sprintf("%d requests still in flight", st.InFlight)
		} else {
			what = "work still on the workers"
		}
		what += fmt.Sprintf(" (held %d, reserved %d, active %d blocks)", st.HeldBlocks, st.ReservedBlocks, st.ActiveBlocks)
		if stopped {
			return "drain: stopped with " + what + ": the test is ending"
		}
		return fmt.Sprintf("drain: %s after waiting %v (wall time); give drain a longer timeout, or stop the load earlier", what, timeout)
	}
	return err.Error()
}

// pinAborted reports whether res's hold ended by its abort or session
// deadline: what mocker_kv_aborts counts. A hold given up because the
// request was refused or withdrawn is "cancelled" and does not count.
func pinAborted(res cluster.Result) bool { return res.HoldOutcome == cluster.HoldAborted }

// requestKeys are the request object's keys, for error messages.
var requestKeys = []string{"max_tokens", "prefix", "prefix_tokens", "prompt_tokens", "tokens"}

// parseRequest reads a request object. It rejects what is wrong with the
// object itself (shape, types, ranges), not what a cluster may refuse. It
// reads the object property by property rather than exporting it whole,
// so a tokens array is length-checked before anything is copied from it.
func parseRequest(rt *sobek.Runtime, v sobek.Value) (cluster.Request, error) {
	var req cluster.Request
	if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
		return req, errors.New("want a request object such as {prompt_tokens: 512, max_tokens: 32}, got " + valueString(v))
	}
	obj, ok := v.(*sobek.Object)
	if !ok || obj.ClassName() != "Object" {
		return req, errors.New("want a request object such as {prompt_tokens: 512, max_tokens: 32}, got " + v.String())
	}
	keys := obj.Keys()
	sort.Strings(keys)
	var err error
	hasPrompt, hasPrefixTokens := false, false
	for _, k := range keys {
		jv := obj.Get(k)
		if jv == nil || sobek.IsUndefined(jv) || sobek.IsNull(jv) { // the default
			continue
		}
		switch k {
		case "prompt_tokens":
			req.PromptTokens, err = intValue(k, jv, 1, cluster.MaxPromptTokens)
			hasPrompt = true
		case "max_tokens":
			req.MaxTokens, err = intValue(k, jv, 1, cluster.MaxRequestMaxTokens)
		case "prefix_tokens":
			req.PrefixTokens, err = intValue(k, jv, 0, cluster.MaxPromptTokens)
			hasPrefixTokens = true
		case "prefix":
			if jv.ExportType() == stringType {
				req.Prefix = jv.String()
				break
			}
			s, isStr := jv.Export().(string)
			if !isStr {
				err = fmt.Errorf("prefix: want a string, got %s", jsonval.Describe(jv.Export()))
			}
			req.Prefix = s
		case "tokens":
			req.Tokens, err = tokensField(rt, jv)
		default:
			err = fmt.Errorf("%s: unknown field; valid fields: %s", k, strings.Join(requestKeys, ", "))
		}
		if err != nil {
			return cluster.Request{}, err
		}
	}
	switch {
	case len(req.Tokens) > 0 && (hasPrompt || req.Prefix != "" || hasPrefixTokens):
		return cluster.Request{}, errors.New("tokens: give either tokens or prompt_tokens (with prefix, prefix_tokens), not both")
	case len(req.Tokens) == 0 && !hasPrompt:
		return cluster.Request{}, errors.New("prompt_tokens: required (an integer ≥ 1), or give tokens")
	case req.PrefixTokens > req.PromptTokens && len(req.Tokens) == 0:
		return cluster.Request{}, fmt.Errorf("prefix_tokens: want at most prompt_tokens (%d), got %d", req.PromptTokens, req.PrefixTokens)
	}
	return req, nil
}

// stringType and int64Type are the types sobek exports a string and an
// integral number as.
var (
	stringType = reflect.TypeFor[string]()
	int64Type  = reflect.TypeFor[int64]()
)

// intValue is intField for a JS value: an integral number in range is read
// without exporting (boxing) it; anything else goes through intField,
// which says what is wrong.
func intValue(name string, v sobek.Value, lo, hi int64) (int, error) {
	if v.ExportType() == int64Type {
		if n := v.ToInteger(); n >= lo && n <= hi {
			return int(n), nil
		}
	}
	return intField(name, v.Export(), lo, hi)
}

func intField(name string, v any, lo, hi int64) (int, error) {
	n, err := jsonval.Int(name, v, lo, hi)
	return int(n), err
}

// tokensField reads a tokens array: its length first, against
// cluster.MaxPromptTokens, then its ids.
func tokensField(rt *sobek.Runtime, v sobek.Value) ([]uint32, error) {
	arr, ok := v.(*sobek.Object)
	if !ok || arr.ClassName() != "Array" {
		return nil, fmt.Errorf("tokens: want an array of token ids, got %s", jsonval.Describe(v.Export()))
	}
	n := arr.Get("length").ToInteger()
	if n == 0 {
		return nil, errors.New("tokens: want at least one token id, got an empty array")
	}
	if n > cluster.MaxPromptTokens {
		return nil, fmt.Errorf("tokens: want at most %d token ids, got %d", cluster.MaxPromptTokens, n)
	}
	var list []any
	if err := rt.ExportTo(v, &list); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	out := make([]uint32, len(list))
	for i, x := range list {
		id, err := jsonval.Int("tokens", x, 0, math.MaxUint32)
		if err != nil {
			// Name the element only on the error path.
			_, err = jsonval.Int(fmt.Sprintf("tokens[%d]", i), x, 0, math.MaxUint32)
			return nil, err
		}
		out[i] = uint32(id)
	}
	return out, nil
}

func valueString(v sobek.Value) string {
	if v == nil {
		return "undefined"
	}
	return v.String()
}

// resultObject turns a Result into the script's result object. The object
// is dynamic: a field becomes a JS value when the script reads it, so a
// result costs a few allocations rather than a 19-property object built
// per request, most of whose fields a script never reads. To the script it
// reads as a plain object: its keys enumerate in the order below,
// JSON.stringify and the spread operator see every field, and it takes new
// properties, changes and deletions like any other. What a dynamic object
// cannot do is be frozen or sealed, or have a property made read-only or
// an accessor (sobek throws a TypeError saying so); a script that wants
// that freezes a copy ({...r}). index.d.ts says the same.
func resultObject(rt *sobek.Runtime, r cluster.Result, names *valueCache) *sobek.Object {
	return rt.NewDynamicObject(&jsResult{rt: rt, r: r, names: names})
}

// resultFields are a result object's fields, in the order they
// enumerate, each with how it reads the Result: one table, so that the
// keys a script sees and the values it reads cannot drift apart.
var resultFields = [...]struct {
	name string
	get  func(o *jsResult) sobek.Value
}{
	{"outcome", func(o *jsResult) sobek.Value { return o.names.get(o.rt, o.r.Outcome) }},
	{"error", func(o *jsResult) sobek.Value {
		if o.r.Outcome != cluster.OutcomeCompleted || o.r.Truncated {
			return o.rt.ToValue(o.r.Error)
		}
		return sobek.Null() // when completed in full
	}},
	{"ttft_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.TTFTMs) }},
	{"itl_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.ITLMs) }},
	{"e2e_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.E2EMs) }},
	{"pin_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.HoldMs) }},
	{"transfer_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.TransferMs) }},
	{"decode_wait_ms", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.DecodeWaitMs) }},
	{"output_tokens", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.OutputTokens) }},
	{"cached_tokens", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.CachedTokens) }},
	{"prefill_worker", func(o *jsResult) sobek.Value { return o.names.get(o.rt, o.r.PrefillWorker) }},
	{"decode_worker", func(o *jsResult) sobek.Value { return o.names.get(o.rt, o.r.DecodeWorker) }},
	{"prefill_dp_rank", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.PrefillDPRank) }},
	{"decode_dp_rank", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.DecodeDPRank) }},
	{"transfer_id", func(o *jsResult) sobek.Value { return o.rt.ToValue(float64(o.r.TransferID)) }},
	{"pinned", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.HoldStarted) }},
	{"pin_outcome", func(o *jsResult) sobek.Value { return o.names.get(o.rt, o.r.HoldOutcome) }},
	{"prefill_rejected", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.PrefillRejected) }},
	{"truncated", func(o *jsResult) sobek.Value { return o.rt.ToValue(o.r.Truncated) }},
}

// resultKeys are resultFields' names; resultField finds one by name.
var resultKeys, resultField = func() ([]string, map[string]int) {
	keys, index := make([]string, len(resultFields)), make(map[string]int, len(resultFields))
	for i, f := range resultFields {
		keys[i], index[f.name] = f.name, i
	}
	return keys, index
}()

// jsResult is the sobek.DynamicObject behind a result object. Until the
// script first sets or deletes a property it reads the Result itself;
// then its fields move into props (own), which holds every property from
// there on, in keys' order.
type jsResult struct {
	rt    *sobek.Runtime
	r     cluster.Result
	names *valueCache
	own   bool
	props map[string]sobek.Value
	keys  []string
}

// field is the Result's value of key, or nil for no such field.
func (o *jsResult) field(key string) sobek.Value {
	if i, ok := resultField[key]; ok {
		return resultFields[i].get(o)
	}
	return nil
}

// materialize moves the fields into props, for a change to the object.
func (o *jsResult) materialize() {
	if o.own {
		return
	}
	o.own = true
	o.props = make(map[string]sobek.Value, len(resultKeys))
	o.keys = append(make([]string, 0, len(resultKeys)+2), resultKeys...)
	for _, f := range resultFields {
		o.props[f.name] = f.get(o)
	}
}

func (o *jsResult) Get(key string) sobek.Value {
	if o.own {
		return o.props[key]
	}
	return o.field(key)
}

func (o *jsResult) Set(key string, val sobek.Value) bool {
	o.materialize()
	if _, ok := o.props[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.props[key] = val
	return true
}

func (o *jsResult) Has(key string) bool {
	if o.own {
		_, ok := o.props[key]
		return ok
	}
	_, ok := resultField[key]
	return ok
}

func (o *jsResult) Delete(key string) bool {
	if !o.Has(key) {
		return true
	}
	o.materialize()
	delete(o.props, key)
	o.keys = slices.DeleteFunc(o.keys, func(k string) bool { return k == key })
	return true
}

func (o *jsResult) Keys() []string {
	if o.own {
		return slices.Clone(o.keys)
	}
	return resultKeys // sobek only reads it
}

// MarshalJSON writes the object as encoding/json writes a plain object's
// exported map (setup() data goes through it): keys sorted, values as
// exported.
func (o *jsResult) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(resultKeys))
	for _, k := range o.Keys() {
		m[k] = o.Get(k).Export()
	}
	return json.Marshal(m)
}

// maxCachedNames bounds a valueCache; it starts over when full.
const maxCachedNames = 1024

// valueCache keeps JS strings of one runtime by their Go string, for the
// short lists of names every result carries. The zero value is ready;
// a nil cache converts every time.
type valueCache struct{ m map[string]sobek.Value }

func (c *valueCache) get(rt *sobek.Runtime, s string) sobek.Value {
	if c == nil {
		return rt.ToValue(s)
	}
	if v, ok := c.m[s]; ok {
		return v
	}
	if c.m == nil || len(c.m) >= maxCachedNames {
		c.m = make(map[string]sobek.Value)
	}
	v := rt.ToValue(s)
	c.m[s] = v
	return v
}

// statsObject turns Stats into the script's snake_case object: every field
// of cluster.Stats by its JSON name, plus aborts (holds ended by abort, the
// count mocker_kv_aborts sums) and, for drain, drained and error.
func statsObject(rt *sobek.Runtime, st cluster.Stats, drained bool, errMsg string) *sobek.Object {
	o := structObject(rt, reflect.ValueOf(st))
	must(o.Set("aborts", st.HoldsAborted))
	must(o.Set("drained", drained))
	if errMsg != "" {
		must(o.Set("error", errMsg))
	}
	return o
}

// structObject converts a struct to a plain JS object keyed by the fields'
// JSON names (snake_case when untagged), recursing into structs and slices,
// so the script sees every field the cluster reports without a hand-kept
// list.
func structObject(rt *sobek.Runtime, v reflect.Value) *sobek.Object {
	o := rt.NewObject()
	setFields(rt, o, v)
	return o
}

// setFields sets the fields of the struct v on o by their JSON names; an
// embedded struct's fields are v's own, as in encoding/json.
func setFields(rt *sobek.Runtime, o *sobek.Object, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		switch name, ok := jsonName(t.Field(i)); {
		case !ok:
		case name == "":
			setFields(rt, o, v.Field(i))
		default:
			must(o.Set(name, jsValue(rt, v.Field(i))))
		}
	}
}

// jsonName is a struct field's key in JSON and in the script: its JSON
// tag's name, or its Go name in snake_case. It is "" for an embedded
// struct without a tag, whose fields encoding/json puts in their parent,
// and ok is false for a field left out.
func jsonName(f reflect.StructField) (name string, ok bool) {
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case tag == "-":
		return "", false
	case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
		return "", true
	case !f.IsExported():
		return "", false
	case tag != "":
		return tag, true
	}
	return snake(f.Name), true
}

func jsValue(rt *sobek.Runtime, v reflect.Value) any {
	switch v.Kind() {
	case reflect.Struct:
		return structObject(rt, v)
	case reflect.Slice, reflect.Array:
		items := make([]any, v.Len())
		for i := range items {
			items[i] = jsValue(rt, v.Index(i))
		}
		return rt.NewArray(items...)
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return jsValue(rt, v.Elem())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(v.Uint())
	case reflect.Map:
		out := rt.NewObject()
		for _, k := range v.MapKeys() {
			must(out.Set(fmt.Sprint(k.Interface()), jsValue(rt, v.MapIndex(k))))
		}
		return out
	}
	return v.Interface()
}

// snake turns a Go field name into snake_case: HeldBlocks → held_blocks,
// TTFTMs → ttft_ms.
func snake(name string) string {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]))
			nextLower := i > 0 && i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
