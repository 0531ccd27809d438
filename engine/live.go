package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrStopped is returned by a Live driver's methods after Stop.
var ErrStopped = errors.New("engine: live worker stopped")

// DefaultDeadlineGrace is the wall-clock grace a Live driver gives a
// contested handoff deadline when LiveOptions.DeadlineGrace is zero: room
// for a claim's trip through goroutines, a scheduler pass on another worker
// and a loopback socket, on a loaded host.
const DefaultDeadlineGrace = 50 * time.Millisecond

// BusyDeadlineGrace caps the grace while the worker has work waiting behind
// the deadline (a pass or a delivery due after it, or an input held back
// for it). Waiting then is not free: the worker runs no later pass, so its
// outputs reach the other workers late and they apply them at their own,
// later, modeled time; a wait of g wall time can shift modeled times by up
// to g × speedup_ratio. A busy worker therefore waits only this long, which
// still covers a claim's hop on an idle host.
const BusyDeadlineGrace = time.Millisecond

// LiveOptions configures a live driver.
type LiveOptions struct {
	// SpeedupRatio divides modeled time to get wall time (Args.SpeedupRatio);
	// values ≤ 0 mean no scaling.
	SpeedupRatio float64
	// Start is the wall instant of modeled time 0. Workers of one cluster
	// share it so their modeled clocks agree. Zero means StartLive's instant.
	Start time.Time
	// DeadlineGrace is how much wall time past deadline / speedup the
	// driver waits before firing a contested deadline (an unclaimed hold's
	// abort or session deadline, a bootstrap request's session timeout; see
	// Worker.NextContestedDeadline). An input stamped before the deadline
	// that arrives within the grace is applied first, so a claim delayed by
	// goroutines and sockets still wins; the deadline still fires stamped
	// at its exact modeled time. The wait costs no spinning: the worker
	// sleeps until the grace ends, and passes due after the deadline wait
	// with it, since a pass must see every deadline before it; while such
	// work waits, the grace is cut to BusyDeadlineGrace (or less). Zero
	// means DefaultDeadlineGrace; a negative value turns the grace off.
	DeadlineGrace time.Duration
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
	stamped bool    // at was chosen by the caller
	at      float64 // the input's modeled time (set on arrival when not stamped)
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
// speedup of wall time (since Start), plus the DeadlineGrace for a contested
// one, so a worker holding only KV with an abort timeout sleeps until the
// abort, and with no deadline at all it parks. Modeled time is wall time
// since Start multiplied by the speedup ratio.
//
// A busy worker chains its passes in modeled time: the next pass starts at
// the previous one's End, however late the wall-clock timer fired, so
// modeled latencies do not depend on timer slack or on the speedup.
//
// Every input has a modeled time. The plain methods (Submit, Reserve, ...)
// stamp it with the wall clock's modeled time on arrival, which is right
// for what the wall clock causes: a load script's requests. The At
// variants (SubmitAt, ReserveAt, ...) take it from the caller, who derives
// it from the modeled time of the event that caused the input (a decode
// reserves at the instant the prefill began to hold, say), so the latency
// of goroutines and sockets between two workers never becomes modeled
// time. An input stamped at is applied at max(at, the latest time the
// worker was already given), after every wake-up due at or before that
// time (passes, deliveries, deadlines) and before any later one, whatever
// the wall clock says; an at ahead of the wall clock moves the worker's
// timeline ahead, and its next pass is paced from there. An input whose
// time lies past a contested deadline still in its grace waits for the
// grace to end (or for an input that settles the deadline), so it cannot
// fire the deadline early. The Worker's rules then apply: an input that
// targets a request a pass in flight touches takes effect at the pass's
// End (Worker.InputAt). The events that precede a pass are delivered when
// it starts, in an Output of their own; the pass's Output at its End.
type Live struct {
	w        *Worker
	speedup  float64
	grace    time.Duration
	start    time.Time
	onOutput func(*Output)
	inputs   chan liveInput
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	passes   atomic.Uint64
	wakes    atomic.Uint64
	last     float64     // latest modeled time handed to the worker (never decreases)
	inflight *Output     // a pass in flight, delivered at its End
	held     []liveInput // inputs waiting for a contested deadline's grace
	lead     Output      // a pass's Output split for delivery (splitLead)
	rest     Output
}

// StartLive starts the goroutine that owns w. From then on w must only be
// reached through the returned Live.
func StartLive(w *Worker, opts LiveOptions) *Live {
	l := &Live{
		w:        w,
		speedup:  opts.SpeedupRatio,
		grace:    opts.DeadlineGrace,
		start:    opts.Start,
		onOutput: opts.OnOutput,
		inputs:   make(chan liveInput),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if l.speedup <= 0 {
		l.speedup = 1
	}
	switch {
	case l.grace == 0:
		l.grace = DefaultDeadlineGrace
	case l.grace < 0:
		l.grace = 0
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
	return l.call(liveInput{kind: liveSubmit, req: req, policy: policy}).err
}

// SubmitAt is Submit at modeled time at (see Live on stamped inputs).
func (l *Live) SubmitAt(at float64, req Request, policy CompletionPolicy) error {
	return l.call(liveInput{kind: liveSubmit, stamped: true, at: at, req: req, policy: policy}).err
}

// ReleaseHeld ends request id's hold; false when there was none (already
// released, never held, or the driver is stopped).
func (l *Live) ReleaseHeld(id uint64, outcome Outcome) bool {
	return l.call(liveInput{kind: liveRelease, id: id, outcome: outcome}).ok
}

// ReleaseHeldAt is ReleaseHeld at modeled time at.
func (l *Live) ReleaseHeldAt(at float64, id uint64, outcome Outcome) bool {
	return l.call(liveInput{kind: liveRelease, stamped: true, at: at, id: id, outcome: outcome}).ok
}

// Cancel withdraws request id; false when the worker does not know it.
func (l *Live) Cancel(id uint64) bool {
	return l.call(liveInput{kind: liveCancel, id: id}).ok
}

// CancelAt is Cancel at modeled time at.
func (l *Live) CancelAt(at float64, id uint64) bool {
	return l.call(liveInput{kind: liveCancel, stamped: true, at: at, id: id}).ok
}

// StartTransfer claims request id's held KV for a transfer of tokens tokens
// (Worker.StartTransfer); ok is false when the hold is gone or the driver is
// stopped.
func (l *Live) StartTransfer(id uint64, tokens int) (delayMs float64, ok bool) {
	r := l.call(liveInput{kind: liveTransfer, id: id, tokens: tokens})
	return r.delayMs, r.ok
}

// StartTransferAt is StartTransfer at modeled time at: the destination's
// reservation time, for a claim that travelled from the decode side. A
// claim stamped before the hold's abort deadline that arrives within the
// DeadlineGrace wins over the deadline.
func (l *Live) StartTransferAt(at float64, id uint64, tokens int) (delayMs float64, ok bool) {
	r := l.call(liveInput{kind: liveTransfer, stamped: true, at: at, id: id, tokens: tokens})
	return r.delayMs, r.ok
}

// Reserve makes req a destination waiting for remote KV (Worker.Reserve).
func (l *Live) Reserve(req Request) error {
	return l.call(liveInput{kind: liveReserve, req: req}).err
}

// ReserveAt is Reserve at modeled time at: the moment the source began to
// hold (source-first) or the request's arrival (destination-first).
func (l *Live) ReserveAt(at float64, req Request) error {
	return l.call(liveInput{kind: liveReserve, stamped: true, at: at, req: req}).err
}

// Activate turns reservation id into a running request (Worker.Activate).
func (l *Live) Activate(id uint64) bool {
	return l.call(liveInput{kind: liveActivate, id: id}).ok
}

// ActivateAt is Activate at modeled time at: the source's release, when
// the transfer completed.
func (l *Live) ActivateAt(at float64, id uint64) bool {
	return l.call(liveInput{kind: liveActivate, stamped: true, at: at, id: id}).ok
}

// CancelDestination drops destination id (Worker.CancelDestination).
func (l *Live) CancelDestination(id uint64) bool {
	return l.call(liveInput{kind: liveCancelDest, id: id}).ok
}

// CancelDestinationAt is CancelDestination at modeled time at: the
// source's abort, say.
func (l *Live) CancelDestinationAt(at float64, id uint64) bool {
	return l.call(liveInput{kind: liveCancelDest, stamped: true, at: at, id: id}).ok
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

// DestinationReadyAt is DestinationReady at modeled time at: the decode's
// reservation time. One stamped before the bootstrap session timeout that
// arrives within the DeadlineGrace wins over the timeout.
func (l *Live) DestinationReadyAt(at float64, id uint64, tokens int) bool {
	return l.call(liveInput{kind: liveReady, stamped: true, at: at, id: id, tokens: tokens}).ok
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
	for {
		l.retryHeld()
		at, due, ok := l.nextAt()
		var tick <-chan time.Time
		if ok {
			d := due - time.Since(l.start)
			if d <= 0 {
				l.wake(at)
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
			l.receive(in)
		case <-tick:
			l.wake(at)
		}
	}
}

// nextAt is when the goroutine must next wake: the worker's NextWake or the
// delivery of the pass in flight, whichever is earlier, in modeled time
// (at) and in wall time since Start (due). A wake-up at or after a
// contested deadline is due only once that deadline's grace is over.
func (l *Live) nextAt() (at float64, due time.Duration, ok bool) {
	at, ok = l.w.NextWake()
	if p := l.inflight; p != nil && (!ok || p.End < at) {
		at, ok = p.End, true
	}
	if !ok {
		return 0, 0, false
	}
	due = l.wallAt(at)
	if g, held := l.graceEnd(at); held {
		due = max(due, g)
	}
	return at, due, true
}

// graceEnd is the wall time (since Start) before which a wake-up or input
// at modeled time t must wait: the end of the grace of a contested deadline
// at or before t. false when no such deadline is pending.
func (l *Live) graceEnd(t float64) (time.Duration, bool) {
	if l.grace <= 0 {
		return 0, false
	}
	d, ok := l.w.NextContestedDeadline()
	if !ok || d > t {
		return 0, false
	}
	g := l.grace
	if l.waitingBehind() {
		g = min(g, BusyDeadlineGrace)
	}
	return l.wallAt(d) + g, true
}

// waitingBehind reports whether work waits for a contested deadline's
// grace: a pass or pending events of the worker, a pass in flight to
// deliver, or inputs held back. The deadline is the earliest wake-up when
// a grace applies, so any of them is due at or after it.
func (l *Live) waitingBehind() bool {
	if len(l.held) > 0 || l.inflight != nil {
		return true
	}
	_, ok := l.w.workWake()
	return ok
}

// receive takes an input: it is stamped on arrival unless the caller
// stamped it, then applied, or held back while a contested deadline before
// its time is in its grace.
func (l *Live) receive(in liveInput) {
	if in.kind == liveMetrics {
		l.settle()
		in.reply <- liveReply{metrics: l.w.Metrics()}
		return
	}
	if !in.stamped {
		in.at = l.Now()
	}
	if !l.tryApply(in) {
		l.held = append(l.held, in)
	}
}

// retryHeld applies the held-back inputs whose wait is over, in arrival
// order.
func (l *Live) retryHeld() {
	if len(l.held) == 0 {
		return
	}
	kept := l.held[:0]
	for _, in := range l.held {
		if !l.tryApply(in) {
			kept = append(kept, in)
		}
	}
	clear(l.held[len(kept):])
	l.held = kept
}

// tryApply brings the worker to the input's time and applies it; false
// (and nothing done) when a contested deadline at or before that time is
// still in its grace.
func (l *Live) tryApply(in liveInput) bool {
	at := max(in.at, l.last)
	if g, held := l.graceEnd(at); held && time.Since(l.start) < g {
		return false
	}
	l.catchUp(at)
	in.reply <- l.apply(in, max(at, l.last))
	return true
}

// catchUp runs every wake-up due at or before modeled time t, however early
// for the wall clock, so an input at t comes after them and before any
// later one.
func (l *Live) catchUp(t float64) {
	for {
		at, ok := l.w.NextWake()
		if p := l.inflight; p != nil && (!ok || p.End < at) {
			at, ok = p.End, true
		}
		if !ok || at > t {
			return
		}
		l.wake(at)
	}
}

// settle runs every wake-up whose wall time has come, so a Metrics reply
// reflects every output already due.
func (l *Live) settle() {
	for {
		at, due, ok := l.nextAt()
		if !ok || due > time.Since(l.start) {
			return
		}
		l.wake(at)
	}
}

func (l *Live) wallAt(modeled float64) time.Duration {
	return time.Duration(modeled / l.speedup * float64(time.Millisecond))
}

// wake delivers the pass in flight if its End has come, then steps the
// worker, which fires due deadlines and runs the next pass. The worker is
// stepped at the modeled time the wake-up was due (at), not at the wall
// clock's, so a pass starts exactly when the previous one ended.
func (l *Live) wake(at float64) {
	l.wakes.Add(1)
	l.last = max(at, l.last)
	now := l.last
	if p := l.inflight; p != nil && p.End <= now {
		l.inflight = nil
		l.deliver(p)
	}
	out := l.w.Step(now)
	l.passes.Store(l.w.Passes())
	switch {
	case out == nil:
	case out.End > now:
		// Only a new pass ends later, and none starts while one is in
		// flight. The events that precede it go out now.
		if out.splitLead(&l.lead, &l.rest) {
			l.deliver(&l.lead)
			out = &l.rest
		}
		l.inflight = out
	default:
		l.deliver(out)
	}
}

func (l *Live) deliver(out *Output) {
	if l.onOutput != nil {
		l.onOutput(out)
	}
}

// apply hands the input to the worker at modeled time now.
func (l *Live) apply(in liveInput, now float64) liveReply {
	l.last = now
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
