package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

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
	sched Scheduler
	hs    Handoffs // nil when the scheduler takes no part in handoffs
	out   Output   // the last pass; kept intact by Steps before its End
	tout  Output   // events flushed while a pass is in flight
	// pending are events caused by inputs and fired deadlines, in time
	// order, flushed by the next Step.
	pending   []Event
	busyUntil float64
	dirty     bool // an input or a productive pass happened since the last idle pass
	passes    uint64
}

// NewWorker builds a worker around a scheduler.
func NewWorker(s Scheduler) *Worker {
	w := &Worker{sched: s}
	w.hs, _ = s.(Handoffs)
	return w
}

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
	w.fire(now)
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
	w.fire(now)
	ok := w.sched.ReleaseHeld(now, id, outcome, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// Cancel withdraws request id wherever it is; a held request is released as
// Aborted. It returns false when the worker does not know id.
func (w *Worker) Cancel(now float64, id uint64) bool {
	w.fire(now)
	ok := w.sched.Cancel(now, id, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// ErrNoHandoff is returned (wrapped) by Reserve on a worker whose scheduler
// does not implement Handoffs.
var ErrNoHandoff = errors.New("engine: scheduler does not support disaggregated handoffs")

// StartTransfer is the decode side claiming request id's held KV: the hold
// moves from SourceHeld to Transferring, its abort and session deadlines
// stop applying, and it is released with Outcome Transferred once the
// modeled transfer of tokens tokens completes, delayMs from now
// (Args.TransferDelayMs). Pass TransferTokens(mode, prompt, missing): the
// whole prompt for full_prompt, or the destination's
// EventDecodeReserved.MissingTokens for destination_missing. ok is false
// when id holds nothing (already aborted, released, transferring or never
// held): the caller must then answer the decode side with an abort.
func (w *Worker) StartTransfer(now float64, id uint64, tokens int) (delayMs float64, ok bool) {
	if w.hs == nil {
		return 0, false
	}
	w.fire(now)
	delayMs, ok = w.hs.StartTransfer(now, id, tokens, &w.pending)
	if ok {
		w.dirty = true
	}
	return delayMs, ok
}

// Reserve makes req a handoff destination waiting for remote KV
// (EventDecodeWaitStart). The scheduler admits it through its normal
// admission as a reservation, blocks for its whole prompt with prefix reuse
// plus a max_num_seqs slot (EventDecodeReserved, with MissingTokens), and
// it then waits, without any timer, for Activate or CancelDestination. It
// fails for an empty prompt, an id the worker knows, a prefill worker, or a
// scheduler without handoffs.
func (w *Worker) Reserve(now float64, req Request) error {
	if w.hs == nil {
		return fmt.Errorf("request %d: %w", req.ID, ErrNoHandoff)
	}
	w.fire(now)
	if err := w.hs.Reserve(now, req, &w.pending); err != nil {
		return err
	}
	w.dirty = true
	return nil
}

// Activate is the transfer's acknowledgement: reservation id becomes a
// running request with its prompt computed and its first token already
// produced by the prefill side, so it decodes the remaining MaxTokens-1
// tokens (indexes 1 onwards) and completes with the Release policy. False
// when id is not reserved.
func (w *Worker) Activate(now float64, id uint64) bool {
	if w.hs == nil {
		return false
	}
	w.fire(now)
	ok := w.hs.Activate(now, id, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// CancelDestination is the transfer's abort (or a caller's cancel) on the
// decode side: destination id, waiting or reserved, is dropped and its
// blocks freed (EventDestinationCancelled). False when id is neither.
func (w *Worker) CancelDestination(now float64, id uint64) bool {
	if w.hs == nil {
		return false
	}
	w.fire(now)
	ok := w.hs.CancelDestination(now, id, &w.pending)
	if ok {
		w.dirty = true
	}
	return ok
}

// NextDeadline reports the earliest handoff deadline (abort, session or
// transfer completion); ok is false when none is pending.
func (w *Worker) NextDeadline() (t float64, ok bool) {
	if w.hs == nil {
		return 0, false
	}
	return w.hs.NextDeadline()
}

// fire applies every deadline due at or before now. Inputs call it first,
// so an input never overtakes a deadline that precedes it.
func (w *Worker) fire(now float64) {
	if w.hs != nil && w.hs.FireDue(now, &w.pending) {
		w.dirty = true
	}
}

// NextWake reports the modeled time at which Step should next be called: the
// end of the current pass when a pass is runnable, a handoff deadline (which
// may fall inside a pass), or at once when events wait to be flushed. ok is
// false when there is nothing to do: the driver must park until an input
// arrives. The time may be earlier than the driver's clock; call Step then.
func (w *Worker) NextWake() (t float64, ok bool) {
	t, ok = w.workWake()
	if len(w.pending) == 0 && w.hs != nil {
		if d, dok := w.hs.NextDeadline(); dok && (!ok || d < t) {
			t, ok = d, true
		}
	}
	return t, ok
}

// workWake is NextWake leaving deadlines out: when pending events or a
// runnable pass next need a Step.
func (w *Worker) workWake() (float64, bool) {
	if n := len(w.pending); n > 0 {
		return min(w.pending[n-1].At, w.busyUntil), true
	}
	if w.dirty && w.sched.HasWork() {
		return w.busyUntil, true
	}
	return 0, false
}

// Step brings the worker to modeled time now and returns what happened, or
// nil when nothing did. It first applies the handoff deadlines due by now;
// then, if a pass is in flight (now is before its End) it only flushes the
// pending events, with their own times, in an Output with Ran false; else it
// flushes them and runs a pass. Events come out in time order: pending ones
// first, then the pass's.
//
// A pass's tokens and completions are stamped at Output.End, which a driver
// should deliver no earlier than that. Step never overwrites the Output of a
// pass before its End, so a driver may hold it while stepping for deadlines
// in between; any other Output is valid until the next Step.
func (w *Worker) Step(now float64) *Output {
	w.fire(now)
	if now < w.busyUntil {
		if len(w.pending) == 0 {
			return nil
		}
		w.tout.reset(now)
		w.tout.Events = w.flush(w.tout.Events)
		w.tout.Metrics = w.Metrics()
		return &w.tout
	}
	if len(w.pending) == 0 && !(w.dirty && w.sched.HasWork()) {
		return nil
	}
	w.out.reset(now)
	w.out.Events = w.flush(w.out.Events)
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

// flush moves the pending events to dst in time order. Inputs arrive with
// non-decreasing times and fire earlier deadlines first, so the sort is a
// safeguard against a caller whose clock stepped back.
func (w *Worker) flush(dst []Event) []Event {
	if !slices.IsSortedFunc(w.pending, cmpEventAt) {
		slices.SortStableFunc(w.pending, cmpEventAt)
	}
	dst = append(dst, w.pending...)
	w.pending = w.pending[:0]
	return dst
}

func cmpEventAt(a, b Event) int { return cmp.Compare(a.At, b.At) }

// Metrics reports the worker's occupancy now.
func (w *Worker) Metrics() Metrics {
	m := w.sched.Metrics()
	m.Passes = w.passes
	return m
}

// Passes counts forward passes that did work; a parked worker's count stays
// still.
func (w *Worker) Passes() uint64 { return w.passes }
