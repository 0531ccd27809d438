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
	// worker's goroutine. It must not call the Live's own methods (that
	// would deadlock) and must not keep out past the call.
	OnOutput func(out *Output)
}

type liveKind uint8

const (
	liveSubmit liveKind = iota
	liveRelease
	liveCancel
	liveMetrics
)

type liveInput struct {
	kind    liveKind
	req     Request
	policy  CompletionPolicy
	id      uint64
	outcome Outcome
	reply   chan liveReply
}

type liveReply struct {
	ok      bool
	err     error
	metrics Metrics
}

// Live runs one Worker on its own goroutine against the wall clock. It
// sleeps until the modeled end of each pass divided by the speedup ratio and
// parks on its input channel when nothing is runnable, so a worker that only
// holds KV costs nothing. Modeled time is wall time since Start multiplied by
// the speedup ratio.
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
	var pending *Output // produced, waiting for its End
	for {
		var at float64
		var ok bool
		if pending != nil {
			at, ok = pending.End, true
		} else {
			at, ok = l.w.NextWake()
		}
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
			in.reply <- l.apply(in)
		case <-tick:
			pending = l.wake(pending, at)
		}
	}
}

func (l *Live) wallAt(modeled float64) time.Duration {
	return time.Duration(modeled / l.speedup * float64(time.Millisecond))
}

// wake delivers the pending output, if any, and runs the next pass.
func (l *Live) wake(pending *Output, at float64) *Output {
	now := max(l.Now(), at)
	if pending != nil {
		l.deliver(pending)
	}
	out := l.w.Step(now)
	l.passes.Store(l.w.Passes())
	if out == nil {
		return nil
	}
	if out.End <= now {
		l.deliver(out)
		return nil
	}
	return out
}

func (l *Live) deliver(out *Output) {
	if l.onOutput != nil {
		l.onOutput(out)
	}
}

func (l *Live) apply(in liveInput) liveReply {
	now := l.Now()
	switch in.kind {
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
