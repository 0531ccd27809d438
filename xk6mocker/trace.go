package xk6mocker

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/jsonval"
	"github.com/kvstrand/mocker/internal/timescale"
	"github.com/kvstrand/mocker/replay"
)

// traceKeys are mocker.trace's option keys, for error messages.
var traceKeys = []string{"block_size", "duration_ms", "max_requests", "rate_scale"}

// errTraceOutsideInit is thrown by mocker.trace called from setup, an
// iteration or teardown, as open() is.
var errTraceOutsideInit = errors.New("mocker.trace: call it in the init context (at the top level of the script), " +
	"where open() reads the trace: mocker.trace(open(__ENV.TRACE, 'b'))")

// traceData is a trace a script loaded: its bytes, as open() gave them,
// and how to play it.
type traceData struct {
	data     []byte
	opts     replay.Options
	requests int // what the schedule sends (checkTrace)
}

// jsTrace implements mocker.trace(data, options): it reads the whole
// trace once, so that a bad row fails the init context with its line and
// field rather than an iteration halfway through the replay.
func (inst *instance) jsTrace(call sobek.FunctionCall) sobek.Value {
	rt := inst.rt
	if !inst.vu.InInit() {
		throw(rt, errTraceOutsideInit)
	}
	data, err := traceBytes(call.Argument(0))
	if err == nil {
		var opts replay.Options
		if opts, err = traceOptions(call.Argument(1)); err == nil {
			var n int
			if n, err = checkTrace(data, opts); err == nil {
				return inst.traceObject(&traceData{data: data, opts: opts, requests: n})
			}
		}
	}
	throw(rt, fmt.Errorf("mocker.trace: %w", err))
	return nil
}

// traceBytes reads open()'s result: a string, or an ArrayBuffer for a
// gzip trace (open(path, 'b')).
func traceBytes(v sobek.Value) ([]byte, error) {
	switch x := v.Export().(type) {
	case string:
		return []byte(x), nil
	case sobek.ArrayBuffer:
		return slices.Clone(x.Bytes()), nil
	}
	return nil, fmt.Errorf("want the trace's contents, open(path) or open(path, 'b') for gzip, got %s", valueString(v))
}

// traceOptions reads mocker.trace's options object.
func traceOptions(v sobek.Value) (replay.Options, error) {
	var opts replay.Options
	if v == nil || sobek.IsUndefined(v) || sobek.IsNull(v) {
		return opts, nil
	}
	m, ok := v.Export().(map[string]any)
	if !ok {
		return opts, fmt.Errorf("options: want an object such as {block_size: 512, rate_scale: 2}, got %s", v.String())
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var err error
		switch x := m[k]; k {
		case "block_size":
			var n int
			n, err = intField(k, x, 1, cluster.MaxPromptTokens)
			opts.BlockSize = n
		case "rate_scale":
			opts.RateScale, err = jsonval.Float(k, x, math.SmallestNonzeroFloat64, 1e9)
		case "max_requests":
			var n int
			n, err = intField(k, x, 0, math.MaxInt32)
			opts.MaxRequests = n
		case "duration_ms":
			opts.DurationMs, err = jsonval.Float(k, x, 0, cluster.MaxTimeoutMs)
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: %s", k, strings.Join(traceKeys, ", "))
		}
		if err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// checkTrace reads the trace through the schedule once, without a
// cluster: every row, and the order of the timestamps. It counts the
// requests the schedule sends, each request ending as it arrives so that
// every session's turns are sent (the count is exact unless duration_ms
// cuts a session, whose later turns' times then depend on the run: then it
// is at most that many).
func checkTrace(data []byte, opts replay.Options) (int, error) {
	src, closeTrace, err := openSource(data, opts)
	if err != nil {
		return 0, err
	}
	defer closeTrace()
	n := 0
	var follow []cluster.StreamArrival
	for {
		a, ok := src.Next()
		if !ok {
			return n, src.Err()
		}
		for follow = append(follow[:0], a); len(follow) > 0; {
			a := follow[len(follow)-1]
			follow = follow[:len(follow)-1]
			n++
			if next, ok := src.Ended(a.Key, a.AtMs, cluster.Result{}); ok {
				follow = append(follow, next)
			}
		}
	}
}

func openSource(data []byte, opts replay.Options) (*replay.Source, func(), error) {
	tr, err := replay.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	src, err := replay.NewSource(tr, opts)
	if err != nil {
		_ = tr.Close()
		return nil, nil, err
	}
	return src, func() { _ = tr.Close() }, nil
}

// traceObject is the script's handle of a loaded trace.
func (inst *instance) traceObject(t *traceData) *sobek.Object {
	o := inst.rt.NewObject()
	must(o.Set("requests", t.requests))
	must(o.Set("play", inst.jsPlay(t)))
	return o
}

// jsPlay implements trace.play(cluster, onResult).
func (inst *instance) jsPlay(t *traceData) func(sobek.FunctionCall) sobek.Value {
	rt := inst.rt
	return func(call sobek.FunctionCall) sobek.Value {
		inst.refuseInInit("trace.play")
		h, _ := call.Argument(0).(*sobek.Object)
		e, ok := inst.handles[h]
		if !ok {
			throw(rt, fmt.Errorf("trace.play: want a cluster from mocker.cluster(), got %s", valueString(call.Argument(0))))
		}
		var onResult sobek.Callable
		if fn := call.Argument(1); !sobek.IsUndefined(fn) && !sobek.IsNull(fn) {
			if onResult, ok = sobek.AssertFunction(fn); !ok {
				throw(rt, fmt.Errorf("trace.play: onResult: want a function (result, request) => …, got %s", fn.String()))
			}
		}
		if !e.stepped {
			throw(rt, errors.New("trace.play: the cluster runs on the wall clock, where arrivals cannot keep the trace's times exactly; "+
				"run the script with --clock virtual (or the default paced clock), without a distributed transport"))
		}
		n, err := inst.play(e, t, onResult)
		if err != nil {
			throw(rt, fmt.Errorf("trace.play: %w", err))
		}
		return rt.ToValue(n)
	}
}

// playEnd is a request of a played trace as it ended, handed from the
// cluster's Settle to the VU.
type playEnd struct {
	key int
	at  float64 // modeled ms
	res cluster.Result
}

// play sends t's requests to the stepped cluster e, each at its modeled
// arrival time, on the VU goroutine: it waits on the run's clock until
// the next arrival is due or a request ends, whichever comes first, so
// every arrival reaches the cluster at the clock instant of its time and a
// session's next turn its delay after the turn before ended. Each result
// goes to the metrics as generate's do, then to onResult. It returns the
// number of requests sent, once every one has ended or the VU must stop.
func (inst *instance) play(e *entry, t *traceData, onResult sobek.Callable) (int, error) {
	var last replay.RequestEnd
	opts := t.opts
	opts.OnRequest = func(r replay.RequestEnd) { last = r }
	src, closeTrace, err := openSource(t.data, opts)
	if err != nil {
		return 0, err
	}
	defer closeTrace()
	ctx := inst.vu.Context()
	clock := e.clock
	gate := clock.NewGate()
	var (
		mu    sync.Mutex
		ended []playEnd
	)
	var (
		queue    []cluster.StreamArrival // follow-ups and the source's next, by (AtMs, Key)
		read     bool                    // the source's next arrival is in queue
		srcKey   int                     // its key
		srcDone  bool
		inflight int
		sent     int
	)
	push := func(a cluster.StreamArrival) {
		i := sort.Search(len(queue), func(i int) bool {
			q := queue[i]
			return q.AtMs > a.AtMs || q.AtMs == a.AtMs && q.Key > a.Key
		})
		queue = slices.Insert(queue, i, a)
	}
	take := func() []playEnd {
		mu.Lock()
		defer mu.Unlock()
		batch := ended
		ended = nil
		return batch
	}
	// When play returns early (the VU's work was stopped, or onResult
	// threw), the requests still out will never reach the metrics: they
	// count as dropped, for drain's mocker_requests_lost, as generate's do
	// once their iteration was interrupted. Their results, should they
	// come, go nowhere.
	defer func() {
		for _, r := range take() {
			inflight--
			inst.emit(e, r.res)
		}
		e.dropped.Add(uint64(max(inflight, 0)))
	}()
	for ctx.Err() == nil {
		for _, r := range take() {
			inflight--
			inst.emit(e, r.res)
			if next, ok := src.Ended(r.key, r.at, r.res); ok {
				push(next)
			}
			if onResult != nil {
				if _, err := onResult(sobek.Undefined(), resultObject(inst.rt, r.res, &inst.names), inst.requestObject(last)); err != nil {
					return sent, err
				}
			}
		}
		if !read && !srcDone {
			if a, ok := src.Next(); ok {
				// The source reuses its token storage two arrivals on;
				// the cluster reads the tokens when the request arrives.
				a.Request.Tokens = slices.Clone(a.Request.Tokens)
				push(a)
				read, srcKey = true, a.Key
			} else {
				srcDone = true
			}
		}
		if len(queue) == 0 {
			if inflight == 0 {
				break
			}
			gate.Wait(ctx)
			continue
		}
		a := queue[0]
		if due := handInBy(e.scale, a.AtMs) - clock.Elapsed(); due > 0 {
			wait, cancel := clock.WithTimeout(ctx, due)
			gate.Wait(wait)
			cancel()
			continue
		}
		queue = queue[1:]
		if read && a.Key == srcKey {
			read = false
		}
		inflight++
		sent++
		key := a.Key
		done := func(res cluster.Result) {
			at := e.scale.Modeled(clock.Elapsed())
			mu.Lock()
			ended = append(ended, playEnd{key: key, at: at, res: res})
			mu.Unlock()
			gate.Open()
		}
		inst.submitAt(e, ctx, a.Request, a.AtMs, done)
	}
	return sent, src.Err()
}

// handInBy is the last instant of script time at which an arrival at
// modeled time atMs can be handed to a stepped cluster and still arrive
// at atMs exactly (SubmitAt): the clock's whole nanoseconds may not map
// onto atMs, and the instant after it would have passed it.
func handInBy(s timescale.Scale, atMs float64) time.Duration {
	d := s.Script(atMs)
	if d > 0 && s.Modeled(d) > atMs {
		d--
	}
	return d
}

// requestObject is what onResult learns of a played request: its trace
// row and session, and when it arrived and ended in modeled ms.
func (inst *instance) requestObject(r replay.RequestEnd) *sobek.Object {
	o := inst.rt.NewObject()
	must(o.Set("line", r.Line))
	must(o.Set("session", r.Session))
	must(o.Set("arrived_ms", r.ArrivedMs))
	must(o.Set("ended_ms", r.EndedMs))
	return o
}
