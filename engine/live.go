package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrStopped is returned by a Live driver's methods after Stop.
var ErrStopped = errors.New("engine: live worker stopped")

// LiveOptions configures a live driver.
type LiveOptions struct {
	// SpeedupRatio divides modeled time to get wall time (Args.SpeedupRatio);
	// values ≤ 0 mean no scaling.
	SpeedupRatio float64
	// Start is the wall instant of modeled time 0. Workers of one cluster
	// share it so their modeled clocks agree. Zero means StartLive's instant.
	Start time.Time
	// OnOutput receives each Output at its modeled End (in wall time), on the
	// worker's goroutine, which waits for it to return: while it runs the
	// worker takes no input and runs no pass. It must not call the Live's
	// own methods, nor block on anything that may be waiting for one of
	// them (a channel another goroutine drains between calls to this Live,
	// a lock held around such a call): either deadlocks. Hand slow work to
	// another goroutine through a buffer instead. It must not keep out past
	// the call.
	OnOutput func(out *Output)
}

type liveKind uint8

const (
	liveSubmit liveKind = iota
	liveRelease
	liveCancel
	liveMetrics
	liveTransfer
	liveReserve
	liveActivate
	liveCancelDest
	liveReady
)

type liveInput struct {
	kind    liveKind
	req     Request
	policy  CompletionPolicy
	id      uint64
	tokens  int
	outcome Outcome
	reply   chan liveReply
}

type liveReply struct {
	ok      bool
	err     error
	delayMs float64
	metrics Metrics
}

// Live runs one Worker on its own goroutine against the wall clock. It
// sleeps until the modeled end of each pass divided by the speedup ratio and
// parks on its input channel when nothing is runnable, so a worker that only
// holds KV costs nothing. A handoff deadline wakes it at deadline /
// speedup of wall time (since Start), so a worker holding only KV with an
// abort timeout sleeps until the abort, and with no deadline at all it
// parks. Modeled time is wall time since Start multiplied by the speedup
// ratio.
//
// A busy worker chains its passes in modeled time: the next pass starts at
// the previous one's End, however late the wall-clock timer fired, so
// modeled latencies do not depend on timer slack or on the speedup. Wall
// time only decides when a pass is delivered and what modeled time an input
// gets: an input is stamped with the wall clock's modeled time, after every
// wake-up already due has run, so it never precedes a pass that was due
// before it arrived. An input that targets a request during a pass takes
// effect at the pass's End (Worker.InputAt). The events that precede a pass
// are delivered when it starts, in an Output of their own; the pass's
// Output at its End.
type Live struct {
	w        *Worker
	speedup  float64
	start    time.Time
	onOutput func(*Output)
	inputs   chan liveInput
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	passes   atomic.Uint64
	wakes    atomic.Uint64
	last     float64 // latest modeled time handed to the worker (never decreases)
	lead     Output  // a pass's Output split for delivery (splitLead)
	rest     Output
}

// StartLive starts the goroutine that owns w. From then on w must only be
// reached through the returned Live.
func StartLive(w *Worker, opts LiveOptions) *Live {
	l := &Live{
		w:        w,
		speedup:  opts.SpeedupRatio,
		start:    opts.Start,
		onOutput: opts.OnOutput,
		inputs:   make(chan liveInput),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if l.speedup <= 0 {
		l.speedup = 1
	}
	if l.start.IsZero() {
		l.start = time.Now()
	}
	go l.run()
	return l
}

// Now is the current modeled time in ms.
func (l *Live) Now() float64 {
	return float64(time.Since(l.start)) / float64(time.Millisecond) * l.speedup
}

// Passes counts the forward passes the worker has run.
func (l *Live) Passes() uint64 { return l.passes.Load() }

// Wakeups counts the times the goroutine woke to step the worker (for a
// pass, a pass's delivery, a deadline or a flush of input events). A parked
// worker's count stays still.
func (l *Live) Wakeups() uint64 { return l.wakes.Load() }

// Submit hands req to the worker at the current modeled time.
func (l *Live) Submit(req Request, policy CompletionPolicy) error {
	r := l.call(liveInput{kind: liveSubmit, req: req, policy: policy})
	return r.err
}

// ReleaseHeld ends request id's hold; false when there was none (already
// released, never held, or the driver is stopped).
func (l *Live) ReleaseHeld(id uint64, outcome Outcome) bool {
	return l.call(liveInput{kind: liveRelease, id: id, outcome: outcome}).ok
}

// Cancel withdraws request id; false when the worker does not know it.
func (l *Live) Cancel(id uint64) bool {
	return l.call(liveInput{kind: liveCancel, id: id}).ok
}

// StartTransfer claims request id's held KV for a transfer of tokens tokens
// (Worker.StartTransfer); ok is false when the hold is gone or the driver is
// stopped.
func (l *Live) StartTransfer(id uint64, tokens int) (delayMs float64, ok bool) {
	r := l.call(liveInput{kind: liveTransfer, id: id, tokens: tokens})
	return r.delayMs, r.ok
}

// Reserve makes req a destination waiting for remote KV (Worker.Reserve).
func (l *Live) Reserve(req Request) error {
	return l.call(liveInput{kind: liveReserve, req: req}).err
}

// Activate turns reservation id into a running request (Worker.Activate).
func (l *Live) Activate(id uint64) bool {
	return l.call(liveInput{kind: liveActivate, id: id}).ok
}

// CancelDestination drops destination id (Worker.CancelDestination).
func (l *Live) CancelDestination(id uint64) bool {
	return l.call(liveInput{kind: liveCancelDest, id: id}).ok
}

// DestinationReady tells a destination-first source that the decode side
// has reserved for request id (Worker.DestinationReady): the prefill leaves
// its bootstrap queue, and its transfer of tokens tokens starts the moment
// its KV is held, so the caller must not call StartTransfer for it. False
// when id is not waiting in a bootstrap queue (timed out, cancelled, already
// ready, not a destination-first prefill) or the driver is stopped.
func (l *Live) DestinationReady(id uint64, tokens int) bool {
	return l.call(liveInput{kind: liveReady, id: id, tokens: tokens}).ok
}

// Metrics reads the worker's occupancy now; zero after Stop.
func (l *Live) Metrics() Metrics {
	return l.call(liveInput{kind: liveMetrics}).metrics
}

// Stop ends the goroutine and waits for it. Work in flight is dropped; the
// Worker may be inspected afterwards.
func (l *Live) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

func (l *Live) call(in liveInput) liveReply {
	in.reply = make(chan liveReply, 1)
	select {
	case l.inputs <- in:
	case <-l.done:
		return liveReply{err: ErrStopped}
	}
	select {
	case r := <-in.reply:
		return r
	case <-l.done:
		return liveReply{err: ErrStopped}
	}
}

func (l *Live) run() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending *Output // a pass in flight, delivered at its End
	for {
		at, ok := l.nextAt(pending)
		var tick <-chan time.Time
		if ok {
			d := l.wallAt(at) - time.Since(l.start)
			if d <= 0 {
				pending = l.wake(pending, at)
				continue
			}
			timer.Reset(d)
			tick = timer.C
		}
		select {
		case <-l.stop:
			return
		case in := <-l.inputs:
			timer.Stop()
			pending = l.settle(pending)
			in.reply <- l.apply(in)
		case <-tick:
			pending = l.wake(pending, at)
		}
	}
}

// nextAt is when the goroutine must next wake: the worker's NextWake or the
// delivery of the pass in flight, whichever is earlier.
func (l *Live) nextAt(pending *Output) (float64, bool) {
	at, ok := l.w.NextWake()
	if pending != nil && (!ok || pending.End < at) {
		at, ok = pending.End, true
	}
	return at, ok
}

// settle runs every wake-up whose wall time has come, so an input that
// arrives while the timer is late is stamped after them, not before.
func (l *Live) settle(pending *Output) *Output {
	for {
		at, ok := l.nextAt(pending)
		if !ok || l.wallAt(at) > time.Since(l.start) {
			return pending
		}
		pending = l.wake(pending, at)
	}
}

func (l *Live) wallAt(modeled float64) time.Duration {
	return time.Duration(modeled / l.speedup * float64(time.Millisecond))
}

// inputClock is the modeled time to stamp an input with: the wall clock's,
// but never before a time the worker was already given.
func (l *Live) inputClock() float64 {
	l.last = max(l.Now(), l.last)
	return l.last
}

// wake delivers the pass in flight if its End has come, then steps the
// worker, which fires due deadlines and runs the next pass. The worker is
// stepped at the modeled time the wake-up was due (at), not at the wall
// clock's, so a pass starts exactly when the previous one ended. It returns
// the pass in flight afterwards.
func (l *Live) wake(pending *Output, at float64) *Output {
	l.wakes.Add(1)
	l.last = max(at, l.last)
	now := l.last
	if pending != nil && pending.End <= now {
		l.deliver(pending)
		pending = nil
	}
	out := l.w.Step(now)
	l.passes.Store(l.w.Passes())
	switch {
	case out == nil:
		return pending
	case out.End > now:
		// Only a new pass ends later, and none starts while one is in
		// flight. The events that precede it go out now.
		if out.splitLead(&l.lead, &l.rest) {
			l.deliver(&l.lead)
			out = &l.rest
		}
		return out
	default:
		l.deliver(out)
		return pending
	}
}

func (l *Live) deliver(out *Output) {
	if l.onOutput != nil {
		l.onOutput(out)
	}
}

func (l *Live) apply(in liveInput) liveReply {
	now := l.inputClock()
	switch in.kind {
	case liveTransfer:
		d, ok := l.w.StartTransfer(now, in.id, in.tokens)
		return liveReply{ok: ok, delayMs: d}
	case liveReserve:
		return liveReply{err: l.w.Reserve(now, in.req)}
	case liveActivate:
		return liveReply{ok: l.w.Activate(now, in.id)}
	case liveCancelDest:
		return liveReply{ok: l.w.CancelDestination(now, in.id)}
	case liveReady:
		return liveReply{ok: l.w.DestinationReady(now, in.id, in.tokens)}
	case liveSubmit:
		return liveReply{err: l.w.Submit(now, in.req, in.policy)}
	case liveRelease:
		return liveReply{ok: l.w.ReleaseHeld(now, in.id, in.outcome)}
	case liveCancel:
		return liveReply{ok: l.w.Cancel(now, in.id)}
	default:
		return liveReply{metrics: l.w.Metrics()}
	}
}
