package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/perf"
)

// PassResult tells the Worker what a pass did, so it knows when the
// scheduler next needs attention.
type PassResult uint8

const (
	// PassIdle: nothing could be scheduled and nothing changed; re-running
	// the pass before a new input would do nothing again.
	PassIdle PassResult = iota
	// PassRan: a forward pass computed or emitted tokens; the worker is busy
	// until the Output's End.
	PassRan
	// PassChanged: no token was computed but the state changed (a
	// preemption), so another pass at the same time may make progress.
	PassChanged
)

// Scheduler is a batching model over a KV pool: the vLLM model implements it,
// the SGLang model will. It is driven by a Worker and never sees wall time.
// Input methods append the lifecycle events they cause to events; Pass
// appends everything else to out, which the Worker has reset.
type Scheduler interface {
	// Submit queues a request at modeled time now.
	Submit(now float64, req Request, policy CompletionPolicy) error
	// ReleaseHeld ends a hold; false (and no effect) when id holds nothing.
	ReleaseHeld(now float64, id uint64, outcome Outcome, events *[]Event) bool
	// Cancel withdraws a waiting, running or held request; false when id is
	// unknown.
	Cancel(now float64, id uint64, events *[]Event) bool
	// Pass runs one scheduling pass starting at now.
	Pass(now float64, out *Output) PassResult
	// HasWork reports whether any request waits or runs.
	HasWork() bool
	// Metrics reports occupancy and counters (Passes is filled by the Worker).
	Metrics() Metrics
}

// Worker is one mock engine: a Scheduler wrapped in the bookkeeping every
// driver needs (when to wake, output buffers, pass counting). It is not safe
// for concurrent use; drivers own it from one goroutine.
type Worker struct {
	sched     Scheduler
	out       Output
	pending   []Event // caused by inputs, flushed by the next Step
	busyUntil float64
	dirty     bool // an input or a productive pass happened since the last idle pass
	passes    uint64
}

// NewWorker builds a worker around a scheduler.
func NewWorker(s Scheduler) *Worker { return &Worker{sched: s} }

// New builds the worker args describe, timing passes with model (nil means
// perf.Polynomial) and drawing output tokens from seed.
func New(args Args, model perf.Model, seed uint64) (*Worker, error) {
	switch args.EngineType {
	case EngineVLLM, "":
		s, err := NewVLLM(args, model, seed)
		if err != nil {
			return nil, err
		}
		return NewWorker(s), nil
	default:
		return nil, fmt.Errorf("engine_type %q: only %q is implemented", args.EngineType, EngineVLLM)
	}
}

// Scheduler returns the wrapped scheduler.
func (w *Worker) Scheduler() Scheduler { return w.sched }

// Submit queues req at modeled time now. It fails for an empty prompt or an
// id the worker already knows.
func (w *Worker) Submit(now float64, req Request, policy CompletionPolicy) error {
	if err := w.sched.Submit(now, req, policy); err != nil {
		return err
	}
	w.dirty = true
	return nil
}

// ReleaseHeld ends the hold of request id with outcome, freeing its blocks to
// the inactive pool. It is idempotent: a second call (or a call for a request
// that never held) does nothing and returns false.
func (w *Worker) ReleaseHeld(now float64, id uint64, outcome Outcome) bool {
	ok := w.sched.ReleaseHeld(now, id, outcome, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// Cancel withdraws request id wherever it is; a held request is released as
// Aborted. It returns false when the worker does not know id.
func (w *Worker) Cancel(now float64, id uint64) bool {
	ok := w.sched.Cancel(now, id, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// NextWake reports the modeled time at which Step should next be called. ok
// is false when nothing is runnable: the driver must park until an input
// arrives. The time may be earlier than the driver's clock; call Step then.
func (w *Worker) NextWake() (t float64, ok bool) {
	if len(w.pending) > 0 || (w.dirty && w.sched.HasWork()) {
		return w.busyUntil, true
	}
	return 0, false
}

// Step runs one pass at modeled time now if one is due, and returns what
// happened, or nil when nothing did (not runnable, or now is before the end
// of the previous pass). The Output is valid until the next Step; its
// tokens and completions are stamped at Output.End, which is also the next
// wake-up, and a driver should deliver them no earlier than that.
func (w *Worker) Step(now float64) *Output {
	if _, ok := w.NextWake(); !ok || now < w.busyUntil {
		return nil
	}
	w.out.reset(now)
	w.out.Events = append(w.out.Events, w.pending...)
	w.pending = w.pending[:0]
	res := PassIdle
	if w.sched.HasWork() {
		res = w.sched.Pass(now, &w.out)
	}
	switch res {
	case PassRan:
		w.passes++
		w.busyUntil = w.out.End
	case PassChanged:
		w.busyUntil = now
	default:
		w.dirty = false
		w.busyUntil = now
	}
	if w.out.empty() {
		return nil
	}
	w.out.Metrics = w.Metrics()
	return &w.out
}

// Metrics reports the worker's occupancy now.
func (w *Worker) Metrics() Metrics {
	m := w.sched.Metrics()
	m.Passes = w.passes
	return m
}

// Passes counts forward passes that did work; a parked worker's count stays
// still.
func (w *Worker) Passes() uint64 { return w.passes }
