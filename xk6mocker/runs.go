package xk6mocker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/internal/timescale"
)

// Clusters live as long as their test run: "process-wide" for a script
// means shared by every VU of the run, while two runs in one process (tests)
// never see each other's clusters, counters or summary sections.
var (
	runsMu sync.Mutex
	runs   = map[uint64]*run{} // by harness run ID
	// closing counts runs whose clusters are not closed yet.
	closing sync.WaitGroup
	// beforeClose, when set (tests), sees every cluster right before it is
	// closed at the end of its run.
	beforeClose func(name string, c *cluster.Cluster)
)

// run holds the clusters of one test run.
type run struct {
	mu       sync.Mutex
	clusters map[string]*entry
	done     bool
	fault    *fault // the run's fault (withFault), for each cluster built
}

// runFor returns the run vu belongs to, creating it for the run's first VU.
// The harness calls the run's end hook after teardown and the summary (also
// when the run was aborted or interrupted), which is when its clusters are
// closed; the run's "KV handoff" summary section lists only its clusters.
func runFor(vu harness.VU) *run {
	rc := vu.Run()
	id := rc.ID()
	runsMu.Lock()
	defer runsMu.Unlock()
	if r, ok := runs[id]; ok {
		return r
	}
	r := &run{clusters: map[string]*entry{}, fault: faultFor(vu.Context())}
	runs[id] = r
	closing.Add(1)
	rc.AddSummarySection(r.writeSummary)
	addSummaryData(rc, r)
	addProgress(rc, r)
	addReport(rc, r, reportFunc(vu.Context()))
	rc.OnEnd(func() {
		defer closing.Done()
		runsMu.Lock()
		delete(runs, id)
		runsMu.Unlock()
		r.finish()
	})
	return r
}

// finish closes the run's clusters.
func (r *run) finish() {
	r.mu.Lock()
	r.done = true
	list := r.sortedEntries()
	r.mu.Unlock()
	for _, e := range list {
		e.close()
	}
}

func (r *run) sortedEntries() []*entry {
	out := make([]*entry, 0, len(r.clusters))
	for _, e := range r.clusters {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// cluster returns the run's cluster called cfg.Name, building it on first
// use.
func (r *run) cluster(cfg cluster.Config, clock harness.Clock) (*entry, error) {
	name := cfg.Name
	if name == "" {
		name = cluster.DefaultName
		cfg.Name = name
	}
	rt, _ := clock.(harness.RunTime)
	paced := rt != nil && rt.Paced()
	coupled := cfg.Transport != nil && cfg.Transport.Coupled
	if clock.Virtual() && !paced && cfg.Transport != nil && !coupled {
		return nil, &harness.ExitError{Code: harness.ExitInvalidConfig, Err: errors.New("transport: the distributed transport talks to workers that run on the wall clock and cannot run under --clock virtual; set transport.coupled (the cluster then drives the workers' clocks), use --clock paced (the default) or --clock wall, or remove transport to run the in-process cluster")}
	}
	// A bad field is reported as such, whatever already runs under the
	// name; the plan then builds the cluster without resolving it again.
	plan, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, errors.New("the test run has ended")
	}
	if e, ok := r.clusters[name]; ok {
		if d := e.cfg.Diff(cfg); d != "" {
			return nil, &cluster.NameInUseError{Name: name, Diff: d}
		}
		return e, nil
	}
	if !clock.Virtual() || cfg.Transport != nil && !coupled {
		c, err := plan.New()
		if err != nil {
			return nil, err
		}
		e := newEntry(name, c, cfg)
		e.fault = r.fault
		if clock.Virtual() {
			// Remote workers keep the wall clock's time; on a paced clock
			// a VU waits for them outside its turn (see outside), and the
			// clock keeps within a millisecond of the wall clock so that
			// requests leave when the script says.
			e.offTurn = clock
			if rt != nil {
				rt.SetPaceSlack(time.Millisecond)
			}
		}
		r.clusters[name] = e
		return e, nil
	}
	// On the run's virtual clock the cluster is one of the clock's
	// participants: its modeled time is the clock's time × speedup_ratio,
	// as on the wall clock, and it moves only when the clock does.
	c, err := plan.NewStepped(func() cluster.Gate { return clock.NewGate() })
	if err != nil {
		return nil, err
	}
	if rt == nil {
		return nil, fmt.Errorf("the run's clock (%T) keeps no time of its own for an in-process cluster", clock)
	}
	// The cluster then looks for requests whose context ended only at the
	// steps where one may have: most steps move nothing but the cluster
	// itself.
	c.SetActivity(rt.Activity)
	e := newEntry(name, c, cfg)
	e.fault = r.fault
	e.stepped = true
	e.clock = rt
	e.leave = clock.Join(c.ClockParticipant())
	r.clusters[name] = e
	return e, nil
}

// entry is one cluster of a run, with what the plugin learns about it from
// the requests it sees.
type entry struct {
	name, engine, router, topology string
	cfg                            cluster.Config
	scale                          timescale.Scale // the cluster's modeled time against the run's
	c                              *cluster.Cluster
	// A cluster on the run's virtual clock (NewStepped): requests go
	// through Submit, ordered by VU and call, and leave ends its part in
	// the clock once closed.
	stepped bool
	clock   harness.RunTime
	leave   func()
	// offTurn is the run's clock when the cluster runs outside it: a
	// remote cluster under a paced clock, whose calls block on other
	// processes and so must not hold the clock's turn (outside).
	offTurn harness.Clock

	lastSample atomic.Int64 // unix nanos of the last held-blocks sample (wall clock only)
	sampler    atomic.Bool  // a VU waiting in generate samples the gauge
	// lastPeak is the cluster's peak held blocks as last pushed to
	// mocker_kv_held_blocks: a sample that finds a higher peak carries it.
	lastPeak atomic.Int64
	// recorded counts the requests whose samples the harness accepted
	// (they ended inside an iteration, setup or teardown).
	recorded atomic.Uint64
	// dropped counts the requests whose samples the harness dropped (their
	// VU was interrupted), and lostCounted those of them, and of the
	// requests a drain left in flight, pushed to mocker_requests_lost.
	dropped, lostCounted atomic.Uint64
	// fault, when set (tests), breaks the cluster from outside the script;
	// taken counts the requests it has seen.
	fault *fault
	taken atomic.Uint64

	mu       sync.Mutex
	closed   bool
	pinHist  metrics.Histogram // hold durations seen in results
	seen     observed          // what the report shows of the results
	final    cluster.Stats     // at close
	finalHld []cluster.Hold
	finalLag cluster.LagReport
	finalNow float64
}

func newEntry(name string, c *cluster.Cluster, cfg cluster.Config) *entry {
	// The cluster's own config has the defaults applied and the names
	// normalised ("VLLM" → "vllm"), as tags should read.
	applied := c.Config()
	e := &entry{name: name, c: c, cfg: cfg, scale: c.Scale(), engine: applied.Engine, router: applied.Router}
	if e.engine == "" {
		e.engine = cluster.DefaultEngine
	}
	if e.router == "" {
		e.router = cluster.DefaultRouter
	}
	e.topology = topology(cfg)
	return e
}

func topology(cfg cluster.Config) string {
	if cfg.Disagg {
		p, d := max(cfg.Prefill.Workers, 1), max(cfg.Decode.Workers, 1)
		return fmt.Sprintf("%d prefill / %d decode", p, d)
	}
	w := cfg.Workers
	if w == 0 {
		w = cluster.DefaultWorkers
	}
	return fmt.Sprintf("%d aggregated", w)
}

// outside runs f, which blocks on work outside the run's clock, so that
// the calling VU does not hold the clock's turn meanwhile: on a paced
// clock the VU waits on a gate that f's goroutine opens (other VUs run,
// time moves with the wall clock); otherwise f runs on the caller.
func (e *entry) outside(f func()) {
	if e.offTurn == nil {
		f()
		return
	}
	g := e.offTurn.NewGate()
	go func() {
		defer g.Open()
		f()
	}()
	g.Wait(context.Background())
}

// clockLag is how far behind the wall clock the cluster's time is now and
// at most: its paced loop's on the wall clock, the run's clock when the
// cluster is stepped on a paced clock.
func (e *entry) clockLag() (now, peak time.Duration) {
	if e.stepped {
		return e.clock.Lag()
	}
	return e.c.ClockLag()
}

// generate runs one request; after the run ended it fails cleanly.
func (e *entry) generate(ctx context.Context, req cluster.Request) cluster.Result {
	if e.isClosed() {
		return closedResult(e)
	}
	if e.faulted() {
		return e.faultResult(ctx)
	}
	return e.c.Generate(ctx, req)
}

func (e *entry) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func closedResult(e *entry) cluster.Result {
	return cluster.Result{Outcome: cluster.OutcomeError, Error: "cluster " + e.name + " is closed: the test run has ended"}
}

// observe keeps what the summary and the report need from one result.
func (e *entry) observe(res cluster.Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen.add(res)
	if res.HoldOutcome != "" {
		e.pinHist.Add(res.HoldMs)
	}
}

func (e *entry) stats() cluster.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.final
	}
	s := e.c.Stats()
	// A stepped cluster's loop stands at the instant it was last settled,
	// which the clock does once every task has blocked: a VU woken at a
	// later instant (after a sleep on an idle cluster) reads it before
	// then. Nothing happens to the cluster between the two (its next
	// event is what the clock wakes it for), so its time is the clock's.
	if e.stepped {
		s.NowMs = max(s.NowMs, e.scale.Modeled(e.clock.Elapsed()))
	}
	return s
}

func (e *entry) holds() []cluster.Hold {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.finalHld
	}
	return e.c.Holds()
}

// lag reads e's loop lag (the last figures once closed).
func (e *entry) lag() cluster.LagReport {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.finalLag
	}
	if e.stepped && e.clock.Paced() {
		now, peak := e.clockLag()
		return cluster.NewLagReport(now, peak, time.Since(e.clock.WallStart()))
	}
	return e.c.Lag()
}

// modeledNow is e's modeled clock in ms (where it stopped once closed).
func (e *entry) modeledNow() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.finalNow
	}
	return e.c.Now()
}

// heldNow is a cluster's held blocks now and at the peak.
type heldNow struct{ now, peak int }

// held reads e's held blocks cheaply (the final figures once closed).
func (e *entry) held() heldNow {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return heldNow{e.final.HeldBlocks, e.final.PeakHeldBlocks}
	}
	now, peak := e.c.HeldBlocks()
	return heldNow{now, peak}
}

// sleep waits ms of the cluster's modeled time.
func (e *entry) sleep(ctx context.Context, ms float64) error {
	if e.isClosed() {
		return nil
	}
	if e.stepped {
		// The cluster's modeled time is the clock's on its scale.
		e.clock.Sleep(ctx, e.scale.Script(ms))
		return ctx.Err()
	}
	var err error
	e.outside(func() { err = e.c.Sleep(ctx, ms) })
	return err
}

// drain waits for the cluster's in-flight work to end.
func (e *entry) drain(ctx context.Context) (cluster.Stats, error) {
	if e.isClosed() {
		return e.stats(), nil
	}
	var st cluster.Stats
	var err error
	e.outside(func() { st, err = e.c.Drain(ctx) })
	return st, err
}

// sampleDue reports whether a periodic held-blocks sample is due, claiming
// it; every VU waiting on the cluster shares one period.
func (e *entry) sampleDue(now time.Time, every time.Duration) bool {
	last := e.lastSample.Load()
	if now.UnixNano()-last < int64(every) {
		return false
	}
	return e.lastSample.CompareAndSwap(last, now.UnixNano())
}

// close snapshots the cluster for the summary and stops it.
func (e *entry) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if beforeClose != nil {
		beforeClose(e.name, e.c)
	}
	e.final = e.c.Stats()
	e.finalHld = e.c.Holds()
	e.finalLag = e.c.Lag()
	e.finalNow = e.c.Now()
	_ = e.c.Close() // the run is over: nobody is left to tell
	if e.leave != nil {
		e.leave()
	}
	e.closed = true
}

// pinPercentiles returns the hold-duration statistics seen so far.
func (e *entry) pinSummary() (count uint64, avg, p50, p90, p99, maxMs float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := &e.pinHist
	if h.Count() == 0 {
		return 0, 0, 0, 0, 0, 0
	}
	return h.Count(), h.Avg(), h.Percentile(50), h.Percentile(90), h.Percentile(99), h.Max()
}
