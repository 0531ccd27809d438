package harness

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/grafana/sobek"
)

// timers implements setTimeout, clearTimeout, setInterval and
// clearInterval for one VU, on its event loop: each pending timer holds a
// slot of the loop, so an iteration (or init, setup...) ends only once its
// timers have fired or been cleared, as in k6. Callbacks run on the VU
// goroutine; one that throws ends the iteration with that exception.
type timers struct {
	v     *vu
	clock Clock

	mu      sync.Mutex
	nextID  int64
	pending map[int64]*timer
}

type timer struct {
	id     int64
	due    time.Time // when it fires, on the clock
	fn     sobek.Callable
	args   []sobek.Value
	delay  time.Duration
	repeat bool
	stop   func() bool
	settle func(func() error) // fills the timer's event-loop slot
}

func newTimers(v *vu, clock Clock) *timers {
	return &timers{v: v, clock: clock, pending: map[int64]*timer{}}
}

// exports are the functions of k6/timers, also set as globals.
func (ts *timers) exports() map[string]any {
	return map[string]any{
		"setTimeout":    func(call sobek.FunctionCall) sobek.Value { return ts.set(call, false) },
		"setInterval":   func(call sobek.FunctionCall) sobek.Value { return ts.set(call, true) },
		"clearTimeout":  ts.clear,
		"clearInterval": ts.clear,
	}
}

func (ts *timers) set(call sobek.FunctionCall, repeat bool) sobek.Value {
	rt := ts.v.rt
	fn, ok := sobek.AssertFunction(call.Argument(0))
	if !ok {
		name := "setTimeout"
		if repeat {
			name = "setInterval"
		}
		throwf(rt, "%s: the first argument must be a function", name)
	}
	delay := timerDelay(call.Argument(1))
	var args []sobek.Value
	if len(call.Arguments) > 2 {
		args = append(args, call.Arguments[2:]...)
	}
	ts.mu.Lock()
	ts.nextID++
	id := ts.nextID
	ts.mu.Unlock()
	ts.arm(id, fn, args, delay, repeat)
	return rt.ToValue(id)
}

// arm reserves an event-loop slot for the timer's next firing and starts
// the clock on it.
func (ts *timers) arm(id int64, fn sobek.Callable, args []sobek.Value, delay time.Duration, repeat bool) {
	tm := &timer{id: id, due: ts.clock.Now().Add(delay), fn: fn, args: args, delay: delay, repeat: repeat,
		settle: ts.v.loop.registerCallback()}
	ts.mu.Lock()
	ts.pending[id] = tm
	ts.mu.Unlock()
	tm.stop = ts.clock.AfterFunc(delay, func() {
		tm.settle(func() error { return ts.fire(tm) })
	})
}

// fire runs tm's callback on the VU goroutine, after those of the timers
// due no later than tm that have not run yet: on the wall clock two timers
// fire on goroutines of their own and may reach the event loop in either
// order, but a script's timers run in the order of their deadlines (then
// of creation), as in JS.
func (ts *timers) fire(tm *timer) error {
	ts.mu.Lock()
	if ts.pending[tm.id] != tm {
		ts.mu.Unlock()
		return nil // cleared, or already run ahead of its own firing
	}
	var due []*timer
	for _, o := range ts.pending {
		if !o.due.After(tm.due) {
			due = append(due, o)
		}
	}
	for _, o := range due {
		delete(ts.pending, o.id)
	}
	ts.mu.Unlock()
	slices.SortFunc(due, func(a, b *timer) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, o := range due {
		if o != tm && o.stop() {
			o.settle(func() error { return nil }) // its slot: it runs here
		}
		if o.repeat {
			ts.arm(o.id, o.fn, o.args, o.delay, o.repeat)
		}
		if _, err := o.fn(sobek.Undefined(), o.args...); err != nil {
			return err
		}
	}
	return nil
}

// clear cancels a timer; unknown or finished ids are ignored, as in JS.
func (ts *timers) clear(id sobek.Value) {
	if id == nil || sobek.IsUndefined(id) || sobek.IsNull(id) {
		return
	}
	key := id.ToInteger()
	ts.mu.Lock()
	tm, ok := ts.pending[key]
	delete(ts.pending, key)
	ts.mu.Unlock()
	if !ok {
		return
	}
	if tm.stop != nil && tm.stop() {
		tm.settle(func() error { return nil }) // free the slot it held
	}
}

// reset forgets every timer when the event loop is reset (an iteration
// that ended abnormally): the next iteration starts with none.
func (ts *timers) reset() {
	ts.mu.Lock()
	old := ts.pending
	ts.pending = map[int64]*timer{}
	ts.mu.Unlock()
	for _, tm := range old {
		if tm.stop != nil {
			tm.stop()
		}
	}
}

// maxDurationMs is the largest duration, in milliseconds, a time.Duration
// holds.
const maxDurationMs = float64(math.MaxInt64 / int64(time.Millisecond))

// timerDelay reads a delay in milliseconds as browsers do: missing, NaN or
// negative means 0.
func timerDelay(v sobek.Value) time.Duration {
	if v == nil || sobek.IsUndefined(v) {
		return 0
	}
	ms := v.ToFloat()
	if math.IsNaN(ms) || ms <= 0 {
		return 0
	}
	if ms > maxDurationMs {
		ms = maxDurationMs
	}
	return time.Duration(ms * float64(time.Millisecond))
}
