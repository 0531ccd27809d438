package cluster

import (
	"fmt"
	"math"
	"time"
)

// The cluster's loop is one goroutine that owns every worker, the router's
// view of them and every request's handoff machine, on one discrete-event
// queue in modeled time (engine.Virtual). Everything else talks to it
// through its mailbox: Generate's arrivals and cancellations, the transfer
// link's replies, queries. Paced, it processes the events of modeled time
// t once the wall clock reaches t / speedup_ratio; when the host falls
// behind, the whole cluster falls behind together — no worker ever sees
// another's output late — and the lag is measured. Virtual, it processes
// them as fast as the CPU allows. Either way, the same arrivals at the
// same modeled times give the same results.

// message is what the mailbox carries.
type message interface{ isMessage() }

type arriveMsg struct {
	h      *call
	resume uint64  // a pause the arrival ends (GenerateThenPause)
	at     float64 // modeled time, when stamped is set
	// stamped arrivals keep their own time (RunVirtual, tests); others are
	// stamped with the loop's now.
	stamped bool
}
type stopMsg struct {
	h      *call
	reason string
}
type linkMsg struct {
	tid     uint64
	reqID   uint64
	arrived bool
	status  linkStatus
}
type queryMsg struct {
	fn   func()
	done chan struct{}
}
type sleepMsg struct {
	ms   float64
	done chan struct{}
}
type drainMsg struct{ done chan struct{} }
type resumeMsg struct{ id uint64 }
type closeMsg struct{}

// arrivalsMsg is RunVirtual's arrivals: order lists the valid ones by
// time (ties in the order given), and their results go to results.
type arrivalsMsg struct {
	arrivals []Arrival
	order    []int32
	results  *batchResults
}

func (arriveMsg) isMessage()   {}
func (stopMsg) isMessage()     {}
func (linkMsg) isMessage()     {}
func (queryMsg) isMessage()    {}
func (sleepMsg) isMessage()    {}
func (drainMsg) isMessage()    {}
func (closeMsg) isMessage()    {}
func (arrivalsMsg) isMessage() {}
func (resumeMsg) isMessage()   {}

// send posts m to the loop; false once the loop has ended.
func (c *Cluster) send(m message) bool {
	if c.opts.stepped {
		_, link := m.(linkMsg)
		_, remote := m.(queryMsg) // a transport's news; only remote clusters send it
		if !link && !(remote && c.remote) {
			panic(fmt.Sprintf("cluster: %T sent to a stepped cluster", m))
		}
	}
	select {
	case c.mail <- m:
		return true
	case <-c.done:
		return false
	}
}

// query runs fn on the loop and waits for it; after the loop ended it runs
// fn here, where nothing else touches the loop's state any more.
func (c *Cluster) query(fn func()) {
	if c.opts.stepped {
		c.stepMu.Lock()
		defer c.stepMu.Unlock()
		fn()
		return
	}
	q := queryMsg{fn: fn, done: make(chan struct{})}
	if !c.send(q) {
		fn()
		return
	}
	select {
	case <-q.done:
	case <-c.done:
		select {
		case <-q.done:
		default:
			fn()
		}
	}
}

// paceSlack is how far ahead of the wall clock a paced loop may process
// events rather than sleep until each one's instant: a timer wake-up per
// event would cost more CPU than the events themselves, and running up to
// a couple of milliseconds early changes no modeled result (events run in
// modeled order either way; an arrival is never stamped before the loop's
// now).
const paceSlack = 2 * time.Millisecond

// PaceSlack is the pacing grain of a paced cluster: how far ahead of the
// wall clock its loop may run an event (paceSlack). What a client measures
// of a paced run is the model's within it.
const PaceSlack = paceSlack

// closeGrace bounds how long a closing loop waits for a transfer server's
// reply before giving the exchange up.
const closeGrace = 5 * time.Second

func (c *Cluster) run() {
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var stuckSince time.Time
	// known says at, blocked and ok are the queue's next event as it is:
	// read after the last advance, with no message handled since.
	var at float64
	var blocked, ok, known bool
	for {
		if c.stopping && c.active == 0 {
			for _, w := range c.workers {
				w.last = w.handle.Metrics()
			}
			c.ended = true
			c.publish()
			return
		}
		if !known {
			at, blocked, ok = c.v.Next()
		}
		known = false
		if c.snap != nil && c.snap(at, ok) {
			c.snap = nil
		}
		var wake <-chan time.Time
		switch {
		case ok && !blocked:
			stuckSince = time.Time{}
			if c.pace != nil && !c.stopping && at > c.v.Now() && c.paused() {
				// A caller acts on a result: modeled time waits for it.
				timer.Reset(pauseMax - time.Since(c.pauseTouch))
				wake = timer.C
				break
			}
			if c.pace != nil && !c.stopping {
				if d := c.pace.Until(c.scale.Script(at)); d > 0 {
					timer.Reset(d)
					wake = timer.C
					break
				}
			}
			c.advance(at)
			at, blocked, ok = c.publish()
			known = !c.poll()
			continue
		case ok && blocked && c.stopping:
			// Closing: a reply that never comes must not hold the loop.
			if stuckSince.IsZero() {
				stuckSince = time.Now()
			}
			if time.Since(stuckSince) > closeGrace {
				c.giveUpExchanges()
				continue
			}
			timer.Reset(10 * time.Millisecond)
			wake = timer.C
		}
		c.publish()
		select {
		case m := <-c.mail:
			timer.Stop()
			c.handle(m)
		case <-wake:
		}
	}
}

// advance processes the events up to modeled time at.
func (c *Cluster) advance(at float64) {
	// Refused inputs come back to their request's machine (OnInput is
	// set), so the queue never stops on one.
	_ = c.v.RunUntil(at)
	c.checkDrained()
}

// poll handles the messages already waiting, without blocking, and
// reports whether there were any.
func (c *Cluster) poll() (handled bool) {
	if len(c.mail) == 0 {
		return false // the common case, without a select
	}
	for {
		select {
		case m := <-c.mail:
			c.handle(m)
			handled = true
		default:
			return handled
		}
	}
}

// publish stores the loop's clock for Now, and returns the queue's next
// event (engine.Virtual.Next) that it stores with it.
func (c *Cluster) publish() (at float64, blocked, ok bool) {
	c.nowBits.Store(math.Float64bits(c.v.Now()))
	c.heldPub.Store(int64(c.heldNow))
	c.peakPub.Store(int64(c.stats.peakHeld))
	next := math.Inf(1)
	if at, blocked, ok = c.v.Next(); ok {
		next = at
	}
	c.nextBits.Store(math.Float64bits(next))
	return at, blocked, ok
}

// stamp is the modeled time an input arriving now takes: the wall clock's
// modeled time, but never before what the loop has processed nor past its
// next event.
func (c *Cluster) stamp() float64 {
	if c.pace != nil && !c.stopping && !c.paused() {
		c.v.AdvanceTo(c.wallModeled())
	}
	return c.v.Now()
}

func (c *Cluster) handle(m message) {
	switch m := m.(type) {
	case arriveMsg:
		c.accept(m)
	case arrivalsMsg:
		c.acceptArrivals(m)
	case streamMsg:
		m.s.start()
	case stopMsg:
		if r := m.h.r; r != nil {
			c.stopRequest(r, m.reason)
			if c.remote && !c.opts.stepped {
				c.watchStopped(r)
			}
		} else {
			m.h.stopReason = m.reason
		}
	case linkMsg:
		c.onLinkMsg(m)
	case claimMsg:
		c.acceptClaim(m.h)
	case resumeMsg:
		c.endPause(m.id)
	case queryMsg:
		m.fn()
		close(m.done)
	case sleepMsg:
		done := m.done
		c.v.Call(c.stamp()+m.ms, func() { close(done) })
	case drainMsg:
		done := m.done
		c.drainers = append(c.drainers, func() { close(done) })
		c.checkDrained()
	case closeMsg:
		c.stopping = true
		for _, r := range c.sortedRequests() {
			c.stopRequest(r, errClosed)
		}
	}
	c.publish()
}

// accept schedules an arrival at its modeled time.
func (c *Cluster) accept(m arriveMsg) {
	if c.stopping {
		m.h.deliver(Result{Outcome: OutcomeError, Error: errClosed})
		return
	}
	// A stamped arrival keeps its own time unless the loop has passed it;
	// the others arrive at the loop's now.
	at := c.v.Now()
	if m.stamped {
		at = max(at, m.at)
	} else {
		at = c.stamp()
	}
	h := m.h
	c.v.Call(at, func() { c.arrive(h) })
	if m.resume != 0 {
		c.endPause(m.resume)
	}
}

// wallModeled is the modeled time the wall clock has reached on a paced
// loop.
func (c *Cluster) wallModeled() float64 { return c.scale.Modeled(c.pace.Elapsed()) }

// LagReport says how far the paced loop fell behind the wall clock over
// the cluster's life so far.
type LagReport struct {
	// PeakMs is the most wall time the loop ran behind; NowMs now.
	PeakMs, NowMs float64
	// RunMs is the wall time since the cluster started.
	RunMs float64
}

// Excessive reports whether the lag is worth a warning: it peaked above a
// tenth of the run, so the script's wall-clock pacing offered noticeably
// less modeled load than it says.
func (l LagReport) Excessive() bool { return l.RunMs > 0 && l.PeakMs > 0.1*l.RunMs }

// Lag reports the loop's lag (zero for a virtual cluster).
func (c *Cluster) Lag() LagReport {
	now, peak := c.ClockLag()
	return NewLagReport(now, peak, time.Since(c.started))
}

// NewLagReport is the report of a clock that runs now behind the wall
// clock, at most peak, over run of wall time.
func NewLagReport(now, peak, run time.Duration) LagReport {
	return LagReport{PeakMs: ms(peak), NowMs: ms(now), RunMs: ms(run)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ClockLag reports how far behind the wall clock the cluster's loop is now
// and the most it ever was: when the host cannot keep up with the modeled
// load at this speedup_ratio, the whole cluster runs late together (no
// modeled result changes), and the script's wall-clock pacing then offers
// less modeled load than it says. Zero for a virtual cluster.
func (c *Cluster) ClockLag() (now, peak time.Duration) {
	if c.pace == nil {
		return 0, 0
	}
	return c.pace.Lag()
}
