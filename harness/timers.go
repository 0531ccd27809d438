package harness

import (
	"math"
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
	tm := &timer{settle: ts.v.loop.registerCallback()}
	ts.mu.Lock()
	ts.pending[id] = tm
	ts.mu.Unlock()
	tm.stop = ts.clock.AfterFunc(delay, func() {
		tm.settle(func() error {
			ts.mu.Lock()
			current := ts.pending[id] == tm
			if current {
				delete(ts.pending, id)
			}
			ts.mu.Unlock()
			if !current {
				return nil // cleared after it fired, before it ran
			}
			if repeat {
				ts.arm(id, fn, args, delay, repeat)
			}
			_, err := fn(sobek.Undefined(), args...)
			return err
		})
	})
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
