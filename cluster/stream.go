package cluster

import (
	"context"
	"errors"
	"fmt"
)

// StreamArrival is one of RunStream's arrivals, with the caller's key for
// its result.
type StreamArrival struct {
	Arrival
	Key int
}

// StreamSource yields RunStream's arrivals in time order (times must not
// decrease); ok false ends them. It is called on the cluster's loop, one
// arrival ahead of the modeled clock: the arrival it returned before has
// not reached the cluster yet, so it may reuse the token storage of the
// one before that, and no older.
type StreamSource func() (a StreamArrival, ok bool)

// StreamOptions tune RunStream.
type StreamOptions struct {
	VirtualOptions
	// OnResult receives each request's result, by its arrival's key, on
	// the cluster's loop at the modeled instant the request ended (nowMs),
	// in the order requests end. It may return one follow-up arrival (ok
	// true), at nowMs or later, that owns its tokens: the next turn of a
	// session, which a trace sends only once the turn before has ended.
	OnResult func(key int, nowMs float64, res Result) (next StreamArrival, ok bool)
}

// StreamRun is what RunStream returns: a VirtualRun without a result per
// arrival, which OnResult received instead.
type StreamRun struct {
	// Events is the whole forensic log when VirtualOptions.EventLog asked
	// for it.
	Events []Event
	// Stats are the cluster's counters after the last request ended.
	Stats Stats
	// Series is the cluster's history over modeled time.
	Series Series
	// Holds are the holds the cluster's forensics know at the end: the
	// longest ended ones and any still open, as Cluster.Holds gives them.
	Holds []Hold
}

// RunStream is RunVirtual over arrivals read as the run goes, in memory
// that follows the requests in flight rather than the whole run: the
// source is read one arrival ahead of the clock and each result goes to
// OnResult as its request ends. The same arrivals give RunVirtual's
// results exactly: a stream of n arrivals takes the places among the
// loop's events that RunVirtual's n arrivals take. An arrival with an
// invalid time or request ends at once as an "error" result, without
// reaching the cluster, as RunVirtual's do.
func RunStream(cfg Config, src StreamSource, opts StreamOptions) (StreamRun, error) {
	p, err := cfg.Plan()
	if err != nil {
		return StreamRun{}, err
	}
	return p.RunStream(src, opts)
}

// RunStream runs the planned cluster as the package's RunStream does,
// without resolving its config again.
func (p Plan) RunStream(src StreamSource, opts StreamOptions) (StreamRun, error) {
	if opts.OnResult == nil {
		return StreamRun{}, errors.New("RunStream: StreamOptions.OnResult is required")
	}
	// The source may reuse token storage, which an address-keyed memo of
	// hashes would confuse: the cluster copies each prompt instead (only
	// its tokens past the complete blocks when the arrival carries their
	// hashes).
	c, err := newCluster(p, options{virtual: true, batch: true, memory: !opts.TCP, keepEvents: opts.EventLog})
	if err != nil {
		return StreamRun{}, err
	}
	var run StreamRun
	s := &stream{c: c, src: src, onResult: opts.OnResult}
	s.b = &batchResults{done: make(chan struct{}), sink: s.ended, streaming: true}
	s.b.onDone = func() {
		// As runArrivals does: the figures are taken at the end of the
		// last result's instant, before any timer left over runs.
		at := c.v.Now()
		c.batch.snap = func(next float64, more bool) bool {
			if more && next <= at {
				return false
			}
			run.Stats = c.statsNow()
			run.Stats.NowMs = at
			run.Events = c.forensic.all
			run.Series = c.seriesNow()
			run.Holds = c.forensic.holds()
			s.snapped = true
			close(s.b.done)
			return true
		}
	}
	c.send(streamMsg{s: s})
	select {
	case <-s.b.done:
	case <-c.done:
	}
	if !s.snapped {
		c.query(func() {
			run.Stats = c.statsNow()
			run.Events = c.forensic.all
			run.Series = c.seriesNow()
			run.Holds = c.forensic.holds()
		})
	}
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return run, err
	}
	return run, nil
}

// stream is a RunStream run as its loop sees it.
type stream struct {
	c        *Cluster
	src      StreamSource
	onResult func(key int, nowMs float64, res Result) (StreamArrival, bool)
	b        *batchResults
	// ahead[i&1] is arrival i: arrival i+1 is read before i reaches the
	// cluster.
	ahead   [2]StreamArrival
	snapped bool
}

// streamMsg starts a RunStream run on the loop.
type streamMsg struct{ s *stream }

func (streamMsg) isMessage() {}

// start schedules the stream's arrivals, each read as the one before it
// reaches the cluster.
func (s *stream) start() {
	s.c.v.CallStream(s.read, func(i int) {
		s.b.left++
		s.arrive(s.ahead[i&1])
	})
}

// read reads arrival i ahead; the end of an empty stream ends the run.
func (s *stream) read(i int) (float64, bool) {
	a, ok := s.src()
	if !ok {
		s.b.streaming = false
		if i == 0 {
			s.b.finish()
		}
		return 0, false
	}
	s.ahead[i&1] = a
	return a.AtMs, true
}

// arrive hands an arrival to the cluster, or ends it at once when its
// time or request is invalid.
func (s *stream) arrive(a StreamArrival) {
	req := a.Request
	if !(a.AtMs >= 0) || a.AtMs > maxModeledMs {
		s.b.put(a.Key, Result{Outcome: OutcomeError, Error: fmt.Sprintf("at_ms: want a finite number of modeled ms in [0, %g], got %g", maxModeledMs, a.AtMs)})
		return
	}
	if err := req.validate(); err != nil {
		s.b.put(a.Key, Result{Outcome: OutcomeError, Error: err.Error()})
		return
	}
	h := s.c.newCall()
	*h = call{req: req, batch: s.b, index: a.Key, spare: true}
	s.c.arrive(h)
}

// ended passes a result on, and schedules the follow-up it brings.
func (s *stream) ended(key int, res Result) {
	next, ok := s.onResult(key, s.c.v.Now(), res)
	if !ok {
		return
	}
	s.b.left++
	at := next.AtMs
	if !(at <= maxModeledMs) { // NaN or too late: arrive ends it at once
		at = 0
	}
	s.c.v.Call(at, func() { s.arrive(next) }) // Call clamps at to now
}
