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
	if c.stepped != nil {
		_, link := m.(linkMsg)
		_, remote := m.(queryMsg) // a transport's news; only remote clusters send it
		if !link && !(remote && c.remote != nil) {
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
	if c.stepped != nil {
		c.stepped.mu.Lock()
		defer c.stepped.mu.Unlock()
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
		if c.batch != nil && c.batch.snap != nil && c.batch.snap(at, ok) {
			c.batch.snap = nil
		}
		var wake <-chan time.Time
		switch {
		case ok && !blocked:
			stuckSince = time.Time{}
			if c.paced != nil && !c.stopping && at > c.v.Now() && c.paced.paused() {
				// A caller acts on a result: modeled time waits for it.
				timer.Reset(c.paced.maxPause - time.Since(c.paced.touch))
				wake = timer.C
				break
			}
			if c.paced != nil && !c.stopping {
				if d := c.paced.pacer.Until(c.scale.Script(at)); d > 0 {
					timer.Reset(d)
					wake = timer.C
					break
				}
			}
			c.advance(at)
			at, blocked, ok = c.publish()
			known = !c.poll()
			// The turn ends: the remote workers get what it gave them.
			c.flushRemote()
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
		c.flushRemote()
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
	if c.paced != nil && !c.stopping && !c.paced.paused() {
		c.v.AdvanceTo(c.paced.wallModeled())
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
			if c.remote != nil && c.stepped == nil {
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
		c.paced.end(m.id)
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
		c.paced.end(m.resume)
	}
}
