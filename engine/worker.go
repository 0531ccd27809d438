package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"

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

// Scheduler is a batching model over a KV pool: the vLLM and SGLang models
// implement it. It is driven by a Worker and never sees wall time.
// Input methods append the lifecycle events they cause to events; Pass
// appends everything else to out, which the Worker has reset.
type Scheduler interface {
	// Submit queues a request at modeled time now.
	Submit(now float64, req Request, policy CompletionPolicy) error
	// ReleaseHeld ends a hold; false (and no effect) when id holds nothing
	// or outcome is neither Transferred nor Aborted.
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
	hs    Handoffs   // nil when the scheduler takes no part in handoffs
	sw    slotWaiter // nil when its pool lends no slots
	out   Output     // the last pass; kept intact by Steps before its End
	tout  Output     // events flushed while a pass is in flight
	// pending are events caused by inputs and fired deadlines, in time
	// order, flushed by the next Step.
	pending   []Event
	busyUntil float64
	dirty     bool // an input or a productive pass happened since the last idle pass
	passes    uint64
}

// slotWaiter is implemented by a scheduler whose pool lends slots to
// timed copies (the vLLM model's, with a host tier the copies take time
// to reach): a request short of blocks may wait for a copy to land and
// give its slot back, with nothing else to wake the worker.
type slotWaiter interface {
	// lendsSlots reports whether the pool lends slots at all: a worker
	// asks the others only of one that does.
	lendsSlots() bool
	// nextLanding is when the next copy holding slots lands, while the
	// scheduler has work; ok is false otherwise.
	nextLanding() (at float64, ok bool)
	// landingDue reports whether a copy holding slots landed by now,
	// which the next pass takes in.
	landingDue(now float64) bool
}

// NewWorker builds a worker around a scheduler.
func NewWorker(s Scheduler) *Worker {
	w := &Worker{sched: s}
	w.hs, _ = s.(Handoffs)
	if sw, ok := s.(slotWaiter); ok && sw.lendsSlots() {
		w.sw = sw
	}
	return w
}

// ReportFirstTokensOnly makes w's outputs carry each request's first token
// and no other in Tokens, for a driver that reads nothing else of them: a
// decode pass then writes no record per request. Completions still count
// every token.
func (w *Worker) ReportFirstTokensOnly() {
	w.out.firstTokens = true
	w.tout.firstTokens = true
}

// OmitKVEvents makes w's outputs carry none of its GPU pool's KV events,
// for a driver that reads the pool through its KVView instead and would
// drop them: the cache then spends nothing on recording them. An Output
// whose pass changed the cache is still not empty, so a driver delivers it
// when it would have with its events. The events of the tiers below the
// GPU pool (kv.MediumCPU and below), which the view does not answer for,
// still come. A worker that announces no blocks is left as it is.
func (w *Worker) OmitKVEvents() {
	switch s := w.sched.(type) {
	case *VLLM:
		s.pool.ev.omitAll()
	case *SGLang:
		s.cache.ev.omitAll()
	}
}

// RecordKVTokens makes w's outputs carry the token ids of the blocks their
// KV events store (Output.KVTokens), for a driver that publishes them: the
// prompt's ids as the request gave them, then the generated ones (see the
// package doc on output tokens). Each request then keeps its whole prompt
// rather than the part past its last full block. Call it before the first
// Submit. A worker that records no events (one that announces no blocks,
// or told to omit them) is left as it is.
func (w *Worker) RecordKVTokens() {
	var r *kvRecorder
	var bs int
	switch s := w.sched.(type) {
	case *VLLM:
		r, bs = &s.pool.ev, s.bs
	case *SGLang:
		r, bs = &s.cache.ev, s.page
	default:
		return
	}
	if r.emit {
		r.withTokens, r.bs = true, bs
	}
}

// New builds the worker args describe, timing passes with model (nil means
// perf.Polynomial) and drawing output tokens from seed. args must pass
// Args.Validate, which New calls (an unset engine_type counts as vllm); the
// error is then its *ArgError.
func New(args Args, model perf.Model, seed uint64) (*Worker, error) {
	if args.EngineType == "" {
		args.EngineType = EngineVLLM
	}
	if err := args.Validate(); err != nil {
		return nil, err
	}
	switch args.EngineType {
	case EngineVLLM, EngineTRTLLM, "":
		s, err := NewVLLM(args, model, seed)
		if err != nil {
			return nil, err
		}
		return NewWorker(s), nil
	case EngineSGLang:
		s, err := NewSGLang(args, model, seed)
		if err != nil {
			return nil, err
		}
		return NewWorker(s), nil
	default:
		return nil, fmt.Errorf("engine_type %q: want %q, %q or %q", args.EngineType, EngineVLLM, EngineSGLang, EngineTRTLLM)
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
// that never held) does nothing and returns false, and so does an outcome
// other than Transferred or Aborted. During a pass it takes effect at the
// pass's End (see InputAt).
func (w *Worker) ReleaseHeld(now float64, id uint64, outcome Outcome) bool {
	if outcome != Transferred && outcome != Aborted {
		return false
	}
	now = w.settle(now)
	return w.changed(w.sched.ReleaseHeld(now, id, outcome, &w.pending))
}

// Cancel withdraws request id wherever it is; a held request is released as
// Aborted. It returns false when the worker does not know id. During a pass
// it takes effect at the pass's End (see InputAt): a request the pass
// completes is then unknown, and one it runs still gets the pass's token,
// stamped at the same instant as the cancellation.
func (w *Worker) Cancel(now float64, id uint64) bool {
	now = w.settle(now)
	return w.changed(w.sched.Cancel(now, id, &w.pending))
}

// ErrNoHandoff is returned (wrapped) by Reserve on a worker whose scheduler
// does not implement Handoffs.
var ErrNoHandoff = errors.New("engine: scheduler does not support disaggregated handoffs")

// StartTransfer is the decode side claiming request id's held KV: the hold
// moves from SourceHeld to Transferring, its abort and session deadlines
// stop applying, and it is released with Outcome Transferred once the
// modeled transfer of tokens tokens completes (Args.TransferDelayMs). Pass
// TransferTokens(mode, prompt, missing): the whole prompt for full_prompt,
// or the destination's EventDecodeReserved.MissingTokens for
// destination_missing. ok is false when id holds nothing (already aborted,
// released, transferring or never held): the caller must then answer the
// decode side with an abort.
//
// A hold that began at or before now is claimed at now even while a pass
// is in flight: a held request is in no pass, so the pass-end rule of
// InputAt, which protects the requests a pass touches, does not apply. A
// hold the pass in flight starts can only be claimed at its End. delayMs
// counts from now: the release is due at now + delayMs, so delayMs includes
// any wait for that End, while EventTransferStart.DelayMs is the transfer
// time alone.
func (w *Worker) StartTransfer(now float64, id uint64, tokens int) (delayMs float64, ok bool) {
	if w.hs == nil {
		return 0, false
	}
	at := w.InputAt(now)
	if hs, isBook := w.hs.(holdStarter); isBook {
		if t, held := hs.holdStart(id); held && t <= now {
			at = now
		}
	}
	w.fire(at)
	delayMs, ok = w.hs.StartTransfer(at, id, tokens, &w.pending)
	if !ok {
		return 0, false
	}
	w.dirty = true
	return delayMs + (at - now), true
}

// holdStarter is implemented by every scheduler embedding handoffBook.
type holdStarter interface {
	holdStart(id uint64) (float64, bool)
}

// contester is implemented by every scheduler embedding handoffBook (see
// handoffBook.NextContested).
type contester interface {
	NextContested() (float64, bool)
}

// nextContestedDeadline reports the earliest handoff deadline that a late
// input could still pre-empt: the abort or session deadline of a hold no
// StartTransfer has claimed, or (SGLang destination-first) a bootstrap
// request's session timeout. Tests read it to check that a claim dropped a
// deadline; no driver needs it, since every driver applies inputs in
// modeled-time order.
func (w *Worker) nextContestedDeadline() (t float64, ok bool) {
	c, isC := w.sched.(contester)
	if !isC {
		return 0, false
	}
	return c.NextContested()
}

// Reserve makes req a handoff destination waiting for remote KV
// (EventDecodeWaitStart). The scheduler reserves blocks for its whole
// prompt with prefix reuse (EventDecodeReserved, with MissingTokens in
// whole blocks) and no max_num_seqs slot unless reserve_takes_slot says so;
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
// when id is not reserved. During a pass it takes effect at the pass's End
// (see InputAt).
func (w *Worker) Activate(now float64, id uint64) bool {
	if w.hs == nil {
		return false
	}
	now = w.settle(now)
	return w.changed(w.hs.Activate(now, id, &w.pending))
}

// CancelDestination is the transfer's abort (or a caller's cancel) on the
// decode side: destination id, waiting or reserved, is dropped and its
// blocks freed (EventDestinationCancelled). False when id is neither.
// During a pass it takes effect at the pass's End (see InputAt).
func (w *Worker) CancelDestination(now float64, id uint64) bool {
	if w.hs == nil {
		return false
	}
	now = w.settle(now)
	return w.changed(w.hs.CancelDestination(now, id, &w.pending))
}

// DestinationReady tells a destination-first source (an SGLang prefill
// worker without sglang.optimistic_prefill) that the decode side reserved
// for request id: the prefill leaves the bootstrap queue and runs, and its
// transfer of tokens tokens (TransferTokens of the reservation) starts the
// moment its KV is held, so EventTransferStart follows EventHoldStarted in
// the same Output and the caller must not call StartTransfer for it. False
// when id is not waiting in a bootstrap queue (unknown, timed out,
// cancelled, already ready) or the scheduler has no such queue. During a
// pass it takes effect at the pass's End (see InputAt).
func (w *Worker) DestinationReady(now float64, id uint64, tokens int) bool {
	d, ok := w.sched.(interface {
		DestinationReady(now float64, id uint64, tokens int, events *[]Event) bool
	})
	if !ok {
		return false
	}
	now = w.settle(now)
	return w.changed(d.DestinationReady(now, id, tokens, &w.pending))
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
	if w.sw != nil && w.sw.landingDue(now) {
		w.dirty = true
	}
}

// InputAt is the modeled time at which an input that targets a request
// (ReleaseHeld, Cancel, StartTransfer, Activate, CancelDestination,
// DestinationReady) given
// at now takes effect: now, or the End of the pass in flight. A pass
// decides its tokens, completions and holds when it starts, so the state an
// input would act on during the pass is the state at its End; acting then,
// with the events stamped then, keeps every request's history in time
// order (no pin ends before it starts, no token follows a cancellation).
// The deadlines due by that time fire first, each still stamped and
// delivered at its own time, and the method's result describes the state
// at that time. Submit and Reserve take effect at now: a new request
// waits for the next pass either way.
func (w *Worker) InputAt(now float64) float64 { return max(now, w.busyUntil) }

// changed passes through whether an input took effect, marking the worker
// for a pass when it did: only a change can make a pass runnable or leave
// events to flush.
func (w *Worker) changed(ok bool) bool {
	if ok {
		w.dirty = true
	}
	return ok
}

// settle fires the deadlines due by the time an input at now takes effect
// and returns that time.
func (w *Worker) settle(now float64) float64 {
	at := w.InputAt(now)
	w.fire(at)
	return at
}

// NextWake reports the modeled time at which Step should next be called: the
// end of the current pass when a pass is runnable, a handoff deadline (which
// may fall inside a pass), or at once when events wait to be flushed. ok is
// false when there is nothing to do: the driver must park until an input
// arrives. The time may be earlier than the driver's clock; call Step then.
func (w *Worker) NextWake() (t float64, ok bool) {
	t, ok = w.workWake()
	if w.hs != nil {
		if d, dok := w.hs.NextDeadline(); dok && (!ok || d < t) {
			t, ok = d, true
		}
	}
	return t, ok
}

// workWake is NextWake leaving deadlines out: when pending events, a
// runnable pass or a copy giving back the slots a request may wait for
// next need a Step. Pending events are due at their own
// times, which may lie ahead (an input during a pass is stamped at its End).
func (w *Worker) workWake() (float64, bool) {
	if len(w.pending) > 0 {
		t := w.busyUntil
		for i := range w.pending {
			t = min(t, w.pending[i].At)
		}
		return t, true
	}
	if w.dirty && w.sched.HasWork() {
		return w.busyUntil, true
	}
	if w.sw != nil {
		if t, ok := w.sw.nextLanding(); ok {
			return max(t, w.busyUntil), true
		}
	}
	return 0, false
}

// Step brings the worker to modeled time now and returns what happened, or
// nil when nothing did. It first applies the handoff deadlines due by now;
// then, if a pass is in flight (now is before its End) it only flushes the
// pending events stamped at or before now, with their own times, in an
// Output with Ran false; else it flushes them all and runs a pass. Events
// come out in time order: pending ones first, then the pass's. The Virtual
// and Live drivers deliver those pending events at once, in an Output of
// their own, and the rest of a pass's Output at its End, so no event waits
// for a pass and each request's events reach the consumer in time order.
//
// A pass's tokens and completions are stamped at Output.End, which a driver
// should deliver no earlier than that. Step never overwrites the Output of a
// pass before its End, so a driver may hold it while stepping for deadlines
// in between; any other Output is valid until the next Step.
func (w *Worker) Step(now float64) *Output {
	w.fire(now)
	if now < w.busyUntil {
		w.tout.reset(now)
		w.tout.Events = w.flush(w.tout.Events, now)
		if len(w.tout.Events) == 0 {
			return nil
		}
		w.tout.Metrics = w.Metrics()
		return &w.tout
	}
	if len(w.pending) == 0 && !(w.dirty && w.sched.HasWork()) {
		return nil
	}
	w.out.reset(now)
	w.out.Events = w.flush(w.out.Events, math.Inf(1))
	w.out.lead = len(w.out.Events)
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

// flush moves the pending events stamped at or before upTo to dst in time
// order, keeping later ones (inputs given during a pass, stamped at its
// End) for a later Step. The sort matters only then, or for a caller whose
// clock stepped back.
func (w *Worker) flush(dst []Event, upTo float64) []Event {
	sortEventsByAt(w.pending)
	n := len(w.pending)
	for n > 0 && w.pending[n-1].At > upTo {
		n--
	}
	dst = append(dst, w.pending[:n]...)
	w.pending = w.pending[:copy(w.pending, w.pending[n:])]
	return dst
}

// sortEventsByAt sorts events by At, keeping the order of events at one
// time: slices.SortStableFunc by cmp.Compare of At. pending is nearly in
// order (an input given during a pass comes after the pass's events at
// its End), so an insertion sort, which moves an event only past those
// it goes before, does little more than check the order, without the
// copies of two events per comparison that a cmp function would take.
func sortEventsByAt(evs []Event) {
	for i := 1; i < len(evs); i++ {
		if !cmp.Less(evs[i].At, evs[i-1].At) {
			continue
		}
		e := evs[i]
		j := i
		for j > 0 && cmp.Less(e.At, evs[j-1].At) {
			evs[j] = evs[j-1]
			j--
		}
		evs[j] = e
	}
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
