package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvstrand/mocker/internal/spare"
)

// A batch run (RunVirtual, RunStream) is the cluster's loop on virtual
// time, fed arrivals the loop schedules itself, as fast as the CPU allows:
// no caller waits on a channel per request, and the loop reuses the
// records of the calls that ended for the next arrivals.

// batchDriver is what a batch run holds beside the loop's core.
type batchDriver struct {
	// calls are the records of the calls that ended, for the next
	// arrivals (answer).
	calls spare.List[call]
	// snap, when set, takes the run's figures once the loop has
	// processed every event up to the last result's instant (it is given
	// the next event's time) and reports whether it did.
	snap func(next float64, more bool) bool
}

// batchResults collects the results of a batch of calls on the loop;
// done is closed once every one of them has its result.
type batchResults struct {
	results []Result
	left    int
	done    chan struct{}
	// onDone, when set, runs on the loop as the last result is written,
	// and closes done itself (later).
	onDone func()
	// sink, when set, takes each result instead of results (RunStream),
	// and streaming says more calls may come: the batch is not done
	// while it does, whatever left says.
	sink      func(i int, res Result)
	streaming bool
}

// put writes the result of the batch's call i.
func (b *batchResults) put(i int, res Result) {
	if b.sink != nil {
		b.sink(i, res)
	} else {
		b.results[i] = res
	}
	if b.left--; b.left == 0 && !b.streaming {
		b.finish()
	}
}

// finish ends the batch: every call has its result.
func (b *batchResults) finish() {
	if b.onDone != nil {
		b.onDone() // it closes done
	} else {
		close(b.done)
	}
}

// keepCall keeps a call of RunVirtual's for a later arrival.
func (c *Cluster) keepCall(h *call) {
	if !c.opts.fresh {
		c.batch.calls.Put(h)
	}
}

// newCall returns a call for an arrival of RunVirtual's.
func (c *Cluster) newCall() *call {
	if h := c.batch.calls.Take(); h != nil {
		return h
	}
	return new(call)
}

// Arrival is a request reaching the cluster at modeled time AtMs.
type Arrival struct {
	AtMs    float64
	Request Request
}

// VirtualOptions tune RunVirtual.
type VirtualOptions struct {
	// TCP runs each handoff's transfer-room steps over real sockets
	// through the prefill workers' transfer servers, as New does, instead
	// of in memory. Results are the same either way; this costs the
	// syscalls.
	TCP bool
	// EventLog keeps the whole forensic log in VirtualRun.Events (it grows
	// with the run: several events per request).
	EventLog bool
}

// VirtualRun is what RunVirtual returns.
type VirtualRun struct {
	// Results holds one Result per arrival, in the arrivals' order.
	Results []Result
	// Events is the whole forensic log, in the order the loop recorded
	// it, when VirtualOptions.EventLog asked for it.
	Events []Event
	// Stats are the cluster's counters after the last request ended.
	Stats Stats
	// Series is the cluster's history over modeled time.
	Series Series
}

// RunVirtual runs a whole cluster on virtual time: every arrival reaches
// the cluster at its modeled time, the loop runs as fast as the CPU allows,
// and the run ends when the last request has. The same config, seed and
// arrivals give byte-identical results and event log, whatever the host is
// doing. The arrivals are read as they reach the cluster, and an arrival's
// Tokens, when given, are used as they are: none may change during the
// run. Config errors and invalid arrivals (a negative
// or non-finite time, an OnToken, which RunVirtual does not call) are
// returned before anything runs; a bad request is
// an "error" Result, as from Generate.
func RunVirtual(cfg Config, arrivals []Arrival, opts VirtualOptions) (VirtualRun, error) {
	return runArrivals(cfg, arrivals, options{virtual: true, memory: !opts.TCP, keepEvents: opts.EventLog, shareTokens: true})
}

// runArrivals runs arrivals through a cluster built with opts: RunVirtual,
// or a cluster paced against the wall clock for tests that compare the two.
func runArrivals(cfg Config, arrivals []Arrival, opts options) (VirtualRun, error) {
	for i, a := range arrivals {
		if !(a.AtMs >= 0) || a.AtMs > maxModeledMs {
			return VirtualRun{}, fmt.Errorf("arrivals[%d].at_ms: want a finite number of modeled ms in [0, %g], got %g", i, maxModeledMs, a.AtMs)
		}
		if a.Request.OnToken != nil {
			return VirtualRun{}, fmt.Errorf("arrivals[%d]: RunVirtual reports results, not tokens, and would never call OnToken; "+
				"a cluster driven on virtual time by NewStepped calls it", i)
		}
	}
	p, err := cfg.Plan()
	if err != nil {
		return VirtualRun{}, err
	}
	opts.batch = true
	c, err := newCluster(p, opts)
	if err != nil {
		return VirtualRun{}, err
	}
	run := VirtualRun{Results: make([]Result, len(arrivals))}
	// The loop writes the results straight into run.Results, and makes
	// each arrival's call as it arrives, reusing those of the requests
	// that ended: a long run needs neither a channel nor a call record per
	// request.
	results := &batchResults{results: run.Results, done: make(chan struct{})}
	order := make([]int32, 0, len(arrivals))
	for i := range arrivals {
		req := arrivals[i].Request
		if err := req.validate(); err != nil {
			run.Results[i] = Result{Outcome: OutcomeError, Error: err.Error()}
			continue
		}
		results.left++
		order = append(order, int32(i))
	}
	// The run's figures are taken on the loop as its last result is
	// written: whatever the loop does after (a timer left over) must not
	// reach them, or the same arrivals could report another now.
	snapped := false
	results.onDone = func() {
		// At the end of the instant: the hold releases and frees that
		// follow the last result at the same modeled time count.
		at := c.v.Now()
		c.batch.snap = func(next float64, more bool) bool {
			if more && next <= at {
				return false
			}
			run.Stats = c.statsNow()
			run.Stats.NowMs = at // the instant, not the wall clock's (paced)
			run.Events = c.forensic.all
			run.Series = c.seriesNow()
			snapped = true
			close(results.done)
			return true
		}
	}
	if results.left == 0 {
		results.onDone = nil
		close(results.done)
	}
	// Arrivals in time order, ties in the order given, so the queue sees
	// them as a script would send them.
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(arrivals[a].AtMs, arrivals[b].AtMs) })
	c.send(arrivalsMsg{arrivals: arrivals, order: order, results: results})
	select {
	case <-results.done:
	case <-c.done:
		// The loop ended before answering every call (it no longer
		// writes): those end as Generate's would, "cluster closed".
		for i := range run.Results {
			if run.Results[i].Outcome == "" { // every result written has one
				run.Results[i] = Result{Outcome: OutcomeError, Error: errClosed}
			}
		}
	}
	if !snapped {
		c.query(func() {
			run.Stats = c.statsNow()
			run.Events = c.forensic.all
			run.Series = c.seriesNow()
		})
	}
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return run, err
	}
	return run, nil
}

// acceptArrivals schedules RunVirtual's arrivals, each as accept would
// schedule it, but kept aside from the loop's event queue
// (engine.Virtual.CallEach): a run of a million arrivals neither fills the
// queue nor takes a closure each. Each arrival's call is made (or reused)
// as it arrives.
func (c *Cluster) acceptArrivals(m arrivalsMsg) {
	arrive := func(i int) {
		k := m.order[i]
		h := c.newCall()
		*h = call{req: m.arrivals[k].Request, batch: m.results, index: int(k), spare: true}
		_ = h.req.validate() // its defaults; runArrivals checked it
		c.arrive(h)
	}
	if c.stopping {
		for i := range m.order {
			arrive(i) // ends it: the cluster is closing
		}
		return
	}
	c.v.CallEach(len(m.order), func(i int) float64 { return m.arrivals[m.order[i]].AtMs }, arrive)
}

// maxModeledMs bounds modeled times taken from callers: about 31 years,
// far beyond any run, and well inside float64's exact integers.
const maxModeledMs = 1e12
