package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/internal/timescale"
)

// A stepped cluster is the cluster's loop driven by an outside clock, such
// as the harness's virtual clock under `mocker run --clock virtual`. It has
// no goroutine and never reads the wall clock: requests handed in with
// Submit wait until the clock calls Settle with the modeled time it has
// reached; Settle applies them in Key order (never in goroutine order),
// runs every event due by then and hands out the results that are ready.
// The clock asks Next when the cluster next needs it. The same calls at
// the same instants therefore give the same results on any host.

// steppedDriver is what a stepped cluster holds beside the loop's core:
// whoever calls Settle runs the loop, under mu, which also guards the
// calls handed in since the last Settle.
type steppedDriver struct {
	mu      sync.Mutex
	newGate func() Gate
	pending []*call
	watched map[context.Context]*watching // contexts of calls in flight
	// watchList holds the same, for Settle's scan.
	watchList []*watching
	// activity, when set (SetActivity), tells Settle whether a context
	// may have ended since polledAt, its value at the last scan.
	activity func() uint64
	polledAt uint64
	polled   bool
}

// Gate is how a caller of a stepped cluster waits while modeled time
// passes: a binary semaphore the outside clock knows about (the harness's
// Gate), so that the clock may move on while the caller waits. Wait
// reports whether the gate was opened (false: ctx ended first; a nil ctx
// never ends).
type Gate interface {
	Wait(ctx context.Context) bool
	Open()
}

// Key orders the requests handed to a stepped cluster at one instant: by
// Source (a script's VU id), then Seq (that VU's call count).
type Key struct{ Source, Seq uint64 }

// NewStepped builds a cluster driven by an outside clock (see Settle and
// Next): no loop goroutine, no wall clock, no socket. newGate makes the
// gates that Generate, Sleep and Drain wait on. The transfer handshake
// goes through the in-memory link: the same exchanges, tickets and
// outcomes as over each prefill worker's transfer server (the results are
// identical, TestVirtual_SocketsChangeNothing), without a system call per
// step of a run that must be as fast as the CPU allows.
func NewStepped(cfg Config, newGate func() Gate) (*Cluster, error) {
	p, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	return p.NewStepped(newGate)
}

// NewStepped builds the planned cluster as the package's NewStepped does,
// without resolving its config again.
func (p Plan) NewStepped(newGate func() Gate) (*Cluster, error) {
	if newGate == nil {
		return nil, errors.New("cluster.NewStepped: newGate is nil")
	}
	c, err := newCluster(p, options{virtual: true, stepped: true, memory: true})
	if err != nil {
		return nil, err
	}
	c.stepped.newGate = newGate
	return c, nil
}

// Submit hands req to a stepped cluster: it arrives at the modeled time
// of the next Settle, after the requests handed in before it with a
// smaller key. done gets the result, exactly once, on the goroutine that
// calls Settle (or at once for a request that is invalid or comes after
// Close); it must not block. When ctx ends before the result, the request
// is stopped at the next Settle (the next whose activity count moved, see
// SetActivity) and done gets outcome "error" once its KV is released.
func (c *Cluster) Submit(ctx context.Context, req Request, key Key, done func(Result)) {
	c.submit(&call{req: req, done: done, ctx: ctx, key: key})
}

// SubmitAt is Submit for a request that arrives at modeled time atMs
// exactly, not at the next Settle: a trace's arrival, whose time the
// outside clock's whole nanoseconds of script time may not hit. A caller
// hands it in before the clock reaches atMs (the Settle that takes it in
// must come at or before atMs); one that comes later arrives at the next
// Settle, as Submit's do. Among arrivals at one instant, those handed in
// at one Settle keep Key order.
func (c *Cluster) SubmitAt(ctx context.Context, req Request, key Key, atMs float64, done func(Result)) {
	if !(atMs >= 0) || atMs > maxModeledMs {
		done(Result{Outcome: OutcomeError, Error: fmt.Sprintf("at_ms: want a finite number of modeled ms in [0, %g], got %g", maxModeledMs, atMs)})
		return
	}
	c.submit(&call{req: req, done: done, ctx: ctx, key: key, atMs: atMs, hasAt: true})
}

func (c *Cluster) submit(h *call) {
	if c.stepped == nil {
		panic("cluster: Submit needs a cluster built by NewStepped")
	}
	if err := h.req.validate(); err != nil {
		h.done(Result{Outcome: OutcomeError, Error: err.Error()})
		return
	}
	c.stepped.mu.Lock()
	if c.ended || c.stopping {
		c.stepped.mu.Unlock()
		h.done(Result{Outcome: OutcomeError, Error: errClosed})
		return
	}
	c.stepped.pending = append(c.stepped.pending, h)
	c.stepped.mu.Unlock()
}

// Settle brings a stepped cluster to modeled time nowMs: the events due
// before it, then the requests handed in since the last Settle (in Key
// order, stamped nowMs), the stops of requests whose context ended, and
// the events these cause at nowMs. Results are handed out as they become
// ready. A nowMs behind the cluster's clock counts as its clock.
func (c *Cluster) Settle(nowMs float64) {
	c.stepped.mu.Lock()
	defer c.stepped.mu.Unlock()
	if c.ended {
		return
	}
	if c.remote != nil {
		c.poll() // what the transport posted: joins, departures
	}
	c.runTo(nowMs)
	arrived := len(c.stepped.pending) > 0
	if arrived {
		in := c.stepped.pending
		c.stepped.pending = nil
		slices.SortStableFunc(in, func(a, b *call) int {
			if d := cmp.Compare(a.key.Source, b.key.Source); d != 0 {
				return d
			}
			return cmp.Compare(a.key.Seq, b.key.Seq)
		})
		for _, h := range in {
			c.watch(h)
			c.accept(arriveMsg{h: h, stamped: h.hasAt, at: h.atMs})
		}
	}
	c.stopEnded(arrived)
	c.runTo(nowMs)
	c.flushRemote()
	c.publish()
}

// SetActivity lets a stepped cluster skip, at a Settle, its look for
// calls whose context has ended when none can have ended since the last
// look: activity returns a count that moves whenever code that may end a
// context has run (harness.VirtualClock.Activity), and Settle looks only
// when it moved or calls were handed in (one may come with its context
// already ended). Without it, every Settle looks. The count must move
// before, not after, whatever ends a context: a cancellation it misses
// goes unseen until the count next moves.
func (c *Cluster) SetActivity(activity func() uint64) {
	c.stepped.mu.Lock()
	defer c.stepped.mu.Unlock()
	c.stepped.activity, c.stepped.polled = activity, false
}

// ClockParticipant is a stepped cluster as an outside clock that counts
// time.Duration offsets sees it (the harness's Participant): an offset on
// the clock is modeled time / speedup.
type ClockParticipant struct {
	c     *Cluster
	scale timescale.Scale
	// The next event as last reported: the clock wakes the cluster at an
	// offset rounded up to whole nanoseconds, which must still reach the
	// event once converted back.
	has    bool
	nextAt time.Duration
	nextMs float64
}

// ClockParticipant returns c as a participant of a clock whose time is
// script time on the cluster's scale (one unit of it is speedup_ratio
// units of modeled time).
func (c *Cluster) ClockParticipant() *ClockParticipant {
	return &ClockParticipant{c: c, scale: c.scale}
}

// Settle settles the cluster at the clock's offset now: at the modeled
// time it maps to, or at the event the clock was asked to wake it for.
func (p *ClockParticipant) Settle(now time.Duration) {
	ms := p.scale.Modeled(now)
	if p.has && now >= p.nextAt {
		ms = max(ms, p.nextMs)
	}
	p.c.Settle(ms)
}

// Next is the clock offset of the cluster's next event; false when it
// has none.
func (p *ClockParticipant) Next() (time.Duration, bool) {
	ms, ok := p.c.Next()
	p.has = ok
	if !ok {
		return 0, false
	}
	p.nextMs = ms
	p.nextAt = p.scale.Script(ms)
	return p.nextAt, true
}

// Next is the modeled time of a stepped cluster's next event; false when
// it has none (then only a new request wakes it).
func (c *Cluster) Next() (float64, bool) {
	c.stepped.mu.Lock()
	defer c.stepped.mu.Unlock()
	if c.ended {
		return 0, false
	}
	at, _, ok := c.v.Next()
	if len(c.stepped.pending) > 0 {
		// Requests wait for the next Settle, which should come now.
		at, ok = c.v.Now(), true
	}
	return at, ok
}

// runTo processes the events up to modeled time limit, waiting for the
// transfer servers' replies the queue stops at.
func (c *Cluster) runTo(limit float64) {
	for {
		c.advance(limit)
		at, blocked, ok := c.v.Next()
		if !ok || !blocked || at > limit {
			return
		}
		if c.remote != nil {
			c.awaitRemote()
			continue
		}
		c.handle(<-c.mail)
	}
}

// watch remembers a call's context, so that Settle stops the call once it
// ends.
func (c *Cluster) watch(h *call) {
	if h.ctx == nil || h.ctx.Done() == nil {
		return
	}
	if c.stepped.watched == nil {
		c.stepped.watched = map[context.Context]*watching{}
	}
	w := c.stepped.watched[h.ctx]
	if w == nil {
		w = &watching{ctx: h.ctx, done: h.ctx.Done(), at: len(c.stepped.watchList)}
		c.stepped.watched[h.ctx] = w
		c.stepped.watchList = append(c.stepped.watchList, w)
	}
	w.calls++
}

// unwatch forgets a finished call's context.
func (c *Cluster) unwatch(h *call) {
	if h.ctx == nil || c.stepped.watched == nil {
		return
	}
	if w, ok := c.stepped.watched[h.ctx]; ok {
		if w.calls--; w.calls <= 0 {
			c.forget(w)
		}
	}
}

// watching is a context some calls in flight were made with.
type watching struct {
	ctx   context.Context
	done  <-chan struct{}
	calls int
	at    int // in watchList
}

// forget drops w from the watched contexts.
func (c *Cluster) forget(w *watching) {
	delete(c.stepped.watched, w.ctx)
	last := c.stepped.watchList[len(c.stepped.watchList)-1]
	c.stepped.watchList[w.at], last.at = last, w.at
	c.stepped.watchList[len(c.stepped.watchList)-1] = nil
	c.stepped.watchList = c.stepped.watchList[:len(c.stepped.watchList)-1]
}

// stopEnded stops, in request order, the requests whose context has
// ended. The contexts a stepped cluster's callers use end while the clock
// stands at an instant, so every Settle of that instant sees it the same.
// arrived says calls were handed in at this Settle.
func (c *Cluster) stopEnded(arrived bool) {
	if c.stepped.activity != nil {
		// Read before the scan: whatever moves the count after this is
		// seen at the next Settle.
		a := c.stepped.activity()
		if c.stepped.polled && a == c.stepped.polledAt && !arrived {
			return
		}
		c.stepped.polled, c.stepped.polledAt = true, a
	}
	// A closed Done channel is checked without a lock: this runs at every
	// step of the clock that may have ended a context.
	ended := false
	for _, w := range c.stepped.watchList {
		select {
		case <-w.done:
			ended = true
		default:
		}
		if ended {
			break
		}
	}
	if !ended {
		return
	}
	if c.remote != nil && c.remote.stopSince.IsZero() {
		c.remote.stopSince = time.Now()
	}
	// A call handed in at this Settle becomes a request only as the
	// Settle runs its events, after this look: one whose context had
	// already ended is stopped at the next look, which must then come
	// whether or not the count moved. Every look that finds an ended
	// context asks for the next, as looking at every Settle would.
	c.stepped.polled = false
	for _, r := range c.sortedRequests() {
		if r.h == nil {
			continue
		}
		if ctx := r.h.ctx; ctx != nil && ctx.Err() != nil {
			if w, ok := c.stepped.watched[ctx]; ok {
				c.forget(w)
			}
			c.stopRequest(r, ctx.Err().Error())
		}
	}
}

// generateStepped is Generate on a stepped cluster.
func (c *Cluster) generateStepped(ctx context.Context, req Request) Result {
	g := c.stepped.newGate()
	var res Result
	c.Submit(ctx, req, Key{}, func(r Result) {
		res = r
		g.Open()
	})
	g.Wait(context.Background())
	return res
}

// sleepStepped is Sleep on a stepped cluster: ms after the cluster's now.
func (c *Cluster) sleepStepped(ctx context.Context, ms float64) error {
	g := c.stepped.newGate()
	c.stepped.mu.Lock()
	if c.ended || c.stopping {
		c.stepped.mu.Unlock()
		return errors.New("sleep: " + errClosed)
	}
	c.v.Call(c.v.Now()+ms, g.Open)
	c.stepped.mu.Unlock()
	if !g.Wait(ctx) {
		return ctx.Err()
	}
	return nil
}

// drainStepped is Drain on a stepped cluster.
func (c *Cluster) drainStepped(ctx context.Context) (Stats, error) {
	g := c.stepped.newGate()
	c.stepped.mu.Lock()
	if c.ended {
		c.stepped.mu.Unlock()
		return c.Stats(), errors.New("drain: " + errClosed)
	}
	c.drainers = append(c.drainers, g.Open)
	c.checkDrained()
	c.stepped.mu.Unlock()
	if !g.Wait(ctx) {
		s := c.Stats()
		return s, fmt.Errorf("drain: %s: %w", busyReason(s), ctx.Err())
	}
	return c.Stats(), nil
}

// closeStepped ends a stepped cluster: every request in flight or handed
// in is cut short (outcome "error", "cluster closed") once its KV is
// released, without waiting for modeled time to pass.
func (c *Cluster) closeStepped() {
	c.stepped.mu.Lock()
	defer c.stepped.mu.Unlock()
	for _, h := range c.stepped.pending {
		h.deliver(Result{Outcome: OutcomeError, Error: errClosed})
	}
	c.stepped.pending = nil
	c.handle(closeMsg{})
	var giveUp <-chan time.Time
	if c.remote != nil {
		// Remote workers that stop answering must not hold Close.
		t := time.NewTimer(remoteCloseGrace)
		defer t.Stop()
		giveUp = t.C
	}
closing:
	for !(c.stopping && c.active == 0) {
		at, blocked, ok := c.v.Next()
		if !ok {
			break
		}
		if blocked {
			select {
			case m := <-c.mail:
				c.handle(m)
			case <-giveUp:
				for _, r := range c.sortedRequests() {
					c.finish(r, handoff.Errored, errClosed)
				}
				break closing
			}
			continue
		}
		c.advance(at)
	}
	for _, w := range c.workers {
		w.last = w.handle.Metrics()
	}
	c.ended = true
	c.publish()
	close(c.done)
}
