package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/perf"
	"github.com/kvstrand/mocker/router"
)

// Cluster is a set of mock workers, a router and the prefill workers'
// transfer servers, living in this process. Build one with New (or Shared),
// send requests with Generate from any number of goroutines, and end it
// with Close.
type Cluster struct {
	cfg       Config
	res       resolved
	log       *slog.Logger
	router    *router.Router
	workers   []*workerNode
	byRole    map[engine.WorkerType][]*workerNode
	start     time.Time
	destFirst bool // SGLang without optimistic prefill: the decode reserves first

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	closeCtx  context.Context
	cancelAll context.CancelFunc
	inflight  sync.WaitGroup

	queue    outQueue
	dispDone chan struct{}

	mu        sync.Mutex
	closed    bool
	nextID    uint64
	active    int // Generate calls in flight
	reqs      map[uint64]*request
	transfers map[uint64]*request // by transfer id, while the hold lasts
	// unclaimed remembers holds given up for a reason that does not say
	// whether a transfer had started (cancel, explicit release), in case
	// the transfer's start is delivered after the hold's end. Bounded.
	unclaimed      map[uint64]bool
	unclaimedOrder []uint64
	stats          counters
	forensic       *forensics
}

// workerNode is one live worker and, for a prefill worker, its transfer
// server.
type workerNode struct {
	name   string
	role   engine.WorkerType
	id     uint64 // router id
	args   engine.Args
	live   *engine.Live
	server *bootstrap.Server
	last   engine.Metrics // last reported, guarded by Cluster.mu
	// delivered counts the pass outputs handed to the dispatcher; equal to
	// live.Passes() when no pass output waits in the driver for its End.
	delivered atomic.Uint64
}

// counters are the cluster-wide aggregates, guarded by Cluster.mu.
type counters struct {
	requests, completed, aborted, rejected, errored uint64
	prefillRejections                               uint64
	pins, pinsReleased, pinsAborted                 uint64
	transfersStarted, transfersDone, transfersLost  uint64
	pinMsTotal, pinMsMax                            float64
	peakHeld                                        int
	causality                                       uint64
	causalityExample                                string
}

// New starts a cluster: the workers' live drivers (one goroutine each, on
// one modeled clock), the router, and a transfer server per prefill worker.
// An invalid cfg is an error naming the field, e.g.
// "decode.args.num_gpu_blocks: ...".
func New(cfg Config) (*Cluster, error) {
	res, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt, err := router.New(res.router, router.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("router_options: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		cfg:       res.cfg,
		res:       res,
		log:       log,
		router:    rt,
		byRole:    make(map[engine.WorkerType][]*workerNode),
		start:     time.Now(),
		closing:   make(chan struct{}),
		closeCtx:  ctx,
		cancelAll: cancel,
		dispDone:  make(chan struct{}),
		reqs:      make(map[uint64]*request),
		transfers: make(map[uint64]*request),
		unclaimed: make(map[uint64]bool),
		forensic:  newForensics(log),
	}
	c.queue.signal = make(chan struct{}, 1)
	go c.dispatch()
	if err := c.startWorkers(); err != nil {
		return nil, errors.Join(err, c.shutdown())
	}
	if c.cfg.Engine == string(engine.EngineSGLang) && !c.res.pools[0].args.SGLang.OptimisticPrefill {
		c.destFirst = true
	}
	return c, nil
}

func (c *Cluster) startWorkers() error {
	seq := uint64(0)
	for _, p := range c.res.pools {
		model, err := perf.FromProfile(p.args.PlannerProfileData)
		if err != nil {
			return fmt.Errorf("%s.planner_profile_data: %w", p.path, err)
		}
		for i := range p.workers {
			n := &workerNode{name: fmt.Sprintf("%s-%d", roleName(p.role), i), role: p.role, id: seq, args: p.args}
			seq++
			w, err := engine.New(p.args, model, c.cfg.Seed^(n.id+1)*0x9e3779b97f4a7c15)
			if err != nil {
				return fmt.Errorf("%s: %w", p.path, err)
			}
			if p.role == engine.WorkerPrefill {
				n.server, err = bootstrap.Listen(bootstrap.Config{
					Addr:            c.cfg.TransferHost + ":0",
					AdvertisedHost:  c.cfg.AdvertisedHost,
					OnDecodeArrived: c.onDecodeArrived(n),
					Logger:          c.log.With("worker", n.name),
				})
				if err != nil {
					return fmt.Errorf("transfer server of %s (transfer_host %q, advertised_host %q): %w",
						n.name, c.cfg.TransferHost, c.cfg.AdvertisedHost, err)
				}
			}
			info := router.WorkerInfo{ID: n.id, Role: router.Role(p.role),
				TotalBlocks: p.args.NumGPUBlocks, BlockSize: p.args.BlockSize}
			if p.args.MaxNumBatchedTokens != nil {
				info.MaxBatchedTokens = *p.args.MaxNumBatchedTokens
			}
			if err := c.router.AddWorker(info); err != nil {
				if n.server != nil {
					_ = n.server.Close()
				}
				return fmt.Errorf("%s: %w", n.name, err)
			}
			n.live = engine.StartLive(w, engine.LiveOptions{
				SpeedupRatio: p.args.SpeedupRatio,
				Start:        c.start,
				OnOutput: func(out *engine.Output) {
					c.queue.push(copyOutput(n, out))
					if out.Ran {
						n.delivered.Add(1)
					}
				},
			})
			c.workers = append(c.workers, n)
			c.byRole[p.role] = append(c.byRole[p.role], n)
		}
	}
	return nil
}

func roleName(r engine.WorkerType) string {
	if r == engine.WorkerAggregated {
		return "worker"
	}
	return string(r)
}

// Name is the cluster's registry name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Config is the configuration the cluster runs with, defaults applied.
func (c *Cluster) Config() Config { return c.cfg }

// Now is the cluster's modeled time in ms, on the clock every worker shares.
func (c *Cluster) Now() float64 {
	if len(c.workers) == 0 {
		return 0
	}
	return c.workers[0].live.Now()
}

// Close stops every worker, transfer server and goroutine the cluster
// started. Requests in flight return with outcome "error" ("cluster
// closed") after releasing what they hold. Close is idempotent and safe to
// call concurrently with Generate.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.closing)
		c.cancelAll()
		c.inflight.Wait()
		c.closeErr = c.shutdown()
	})
	return c.closeErr
}

// shutdown stops the servers, then the workers, then the dispatcher.
func (c *Cluster) shutdown() error {
	var errs []error
	for _, w := range c.workers {
		if w.server != nil {
			if err := w.server.Close(); err != nil {
				errs = append(errs, fmt.Errorf("transfer server of %s: %w", w.name, err))
			}
		}
	}
	for _, w := range c.workers {
		w.live.Stop()
	}
	c.queue.close()
	<-c.dispDone
	c.cancelAll()
	return errors.Join(errs...)
}

// note is a worker Output copied for the dispatcher: the live driver's
// Output is valid only during OnOutput.
type note struct {
	w           *workerNode
	completions []engine.Completion
	rejections  []engine.Rejection
	events      []engine.Event
	kv          []kv.Event
	firstTokens []uint64 // aggregated requests whose first token this pass made
	metrics     engine.Metrics
}

func copyOutput(w *workerNode, out *engine.Output) note {
	n := note{
		w:           w,
		completions: append([]engine.Completion(nil), out.Completions...),
		rejections:  append([]engine.Rejection(nil), out.Rejections...),
		events:      append([]engine.Event(nil), out.Events...),
		metrics:     out.Metrics,
	}
	if w.role == engine.WorkerAggregated {
		for _, tok := range out.Tokens {
			if tok.Index == 0 {
				n.firstTokens = append(n.firstTokens, tok.RequestID)
			}
		}
	}
	if len(out.KVEvents) > 0 {
		n.kv = make([]kv.Event, len(out.KVEvents))
		for i, e := range out.KVEvents {
			e.Blocks = append([]kv.Block(nil), e.Blocks...)
			e.RemovedHashes = append([]kv.SeqHash(nil), e.RemovedHashes...)
			n.kv[i] = e
		}
	}
	return n
}

// outQueue is an unbounded FIFO from the workers' goroutines to the
// dispatcher. It never blocks a worker, so the dispatcher's calls into the
// router and the transfer servers can never stall a pass, and Live methods
// called elsewhere never wait behind a full queue.
type outQueue struct {
	mu      sync.Mutex
	items   []note
	closed  bool
	pending int // pushed and not yet fully processed
	signal  chan struct{}
}

func (q *outQueue) push(n note) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, n)
	q.pending++
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *outQueue) take() (batch []note, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch, q.items = q.items, nil
	return batch, q.closed
}

func (q *outQueue) done(n int) {
	q.mu.Lock()
	q.pending -= n
	q.mu.Unlock()
}

func (q *outQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending == 0
}

func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// dispatch applies worker outputs in order, on one goroutine: request
// state, forensic records, router updates and transfer-server outcomes.
func (c *Cluster) dispatch() {
	defer close(c.dispDone)
	for {
		<-c.queue.signal
		for {
			batch, closed := c.queue.take()
			for i := range batch {
				c.apply(&batch[i])
			}
			c.queue.done(len(batch))
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
		}
	}
}

// apply folds one worker output into the cluster.
func (c *Cluster) apply(n *note) {
	w := n.w
	var after []func()
	touched := make(map[*request]bool)

	c.mu.Lock()
	w.last = n.metrics
	held := 0
	for _, x := range c.workers {
		held += x.last.HeldBlocks
	}
	c.stats.peakHeld = max(c.stats.peakHeld, held)

	for _, e := range n.events {
		r := c.reqs[e.RequestID]
		if r != nil {
			touched[r] = true
		}
		after = c.applyEvent(w, r, e, after)
	}
	for _, comp := range n.completions {
		r := c.reqs[comp.RequestID]
		if r == nil {
			continue
		}
		touched[r] = true
		if w.role == engine.WorkerPrefill {
			r.st.prefillDone = true
			if !comp.Held {
				r.st.prefillEnded = true // nothing held: the prefill is done with it
			}
			r.st.arrival, r.st.firstTokenAt, r.st.cachedTokens = comp.Arrival, comp.FirstTokenAt, comp.CachedTokens
			rid := routerID(r.id)
			after = append(after, func() { c.router.PrefillDone(rid) })
			continue
		}
		if w.role == engine.WorkerAggregated {
			r.st.arrival, r.st.firstTokenAt, r.st.cachedTokens = comp.Arrival, comp.FirstTokenAt, comp.CachedTokens
		}
		r.st.done, r.st.final = true, comp
	}
	for _, id := range n.firstTokens {
		if r := c.reqs[id]; r != nil {
			rid := routerID(r.id)
			after = append(after, func() { c.router.PrefillDone(rid) })
		}
	}
	for _, rej := range n.rejections {
		if r := c.reqs[rej.RequestID]; r != nil {
			touched[r] = true
			rej := rej
			r.st.rejection, r.st.rejectedBy = &rej, w
			if w == r.prefill {
				r.st.prefillEnded = true
			}
		}
	}
	c.mu.Unlock()

	for _, ev := range n.kv {
		c.router.KVEvent(w.id, ev)
	}
	load := router.Load{
		ActiveBlocks:       n.metrics.ActiveBlocks,
		RouterActiveBlocks: n.metrics.RouterActiveBlocks,
		TotalBlocks:        n.metrics.TotalBlocks,
		Running:            n.metrics.Running,
		Waiting:            n.metrics.Waiting,
	}
	if c.res.busy {
		load.RouterActiveBlocks = n.metrics.ActiveBlocks
	}
	c.router.UpdateLoad(w.id, load)
	for _, f := range after {
		f()
	}
	for r := range touched {
		r.poke()
	}
}

// applyEvent handles one lifecycle event under c.mu; work that calls out of
// the cluster (transfer servers, router) is returned in after.
func (c *Cluster) applyEvent(w *workerNode, r *request, e engine.Event, after []func()) []func() {
	decodeName := ""
	if r != nil && r.decode != nil {
		decodeName = r.decode.name
	}
	switch e.Kind {
	case engine.EventHoldStarted:
		c.stats.pins++
		h := Hold{RequestID: e.RequestID, PrefillWorker: w.name, DecodeWorker: decodeName, Blocks: e.Blocks, StartMs: e.At}
		if r != nil && w.server != nil {
			tid := bootstrap.NextTransferID()
			h.TransferID = tid
			r.st.held, r.st.holdStart, r.st.tid = true, e.At, tid
			c.transfers[tid] = r
			srv := w.server
			after = append(after, func() {
				if err := srv.Open(tid); err != nil {
					c.log.Warn("transfer room not opened; the decode will be refused", "worker", w.name, "transfer_id", tid, "err", err)
				}
			})
		}
		c.forensic.holdStarted(h)
	case engine.EventHoldReleased:
		outcome := e.Outcome.String()
		if e.Outcome == engine.Transferred {
			c.stats.pinsReleased++
		} else {
			c.stats.pinsAborted++
		}
		c.stats.pinMsTotal += e.DurationMs
		c.stats.pinMsMax = max(c.stats.pinMsMax, e.DurationMs)
		h, ok := c.forensic.holdEnded(e.RequestID, e.At, e.DurationMs, outcome, e.Outcome == engine.Transferred)
		// A live driver may deliver a transfer's start after the hold's end
		// (the start rides in a pass output delivered at the pass's end), so
		// the transfer counters do not rely on the order of the two events.
		switch {
		case e.Outcome == engine.Transferred:
			c.stats.transfersDone++
		case ok && h.Claimed:
			c.stats.transfersLost++
		case e.Reason == engine.EndCancelled || e.Reason == engine.EndReleased:
			c.rememberUnclaimed(e.RequestID)
		}
		if r != nil {
			r.st.holdEnded, r.st.holdOutcome, r.st.pinMs, r.st.holdEnd = true, e.Outcome, e.DurationMs, e.At
			r.st.prefillEnded = true
		}
		if tid := h.TransferID; ok && tid != 0 && w.server != nil {
			delete(c.transfers, tid)
			srv := w.server
			transferred := e.Outcome == engine.Transferred
			after = append(after, func() {
				var err error
				if transferred {
					err = srv.Complete(tid)
				} else {
					err = srv.Abort(tid)
				}
				if err != nil && !errors.Is(err, bootstrap.ErrClosed) {
					c.log.Warn("transfer outcome not delivered", "worker", w.name, "transfer_id", tid, "err", err)
				}
			})
		}
	case engine.EventTransferStart:
		if r != nil {
			r.st.claimed, r.st.transferMs = true, e.DelayMs
		}
		c.stats.transfersStarted++
		if _, open := c.forensic.transferStarted(e.RequestID, e.At); !open && c.unclaimed[e.RequestID] {
			delete(c.unclaimed, e.RequestID)
			c.stats.transfersLost++
		}
	case engine.EventDecodeWaitStart:
		if r != nil {
			r.st.waitSeen, r.st.waitStart = true, e.At
			c.forensic.record(Event{Name: EventDecodeWait, AtMs: e.At, RequestID: e.RequestID, TransferID: r.st.tid,
				PrefillWorker: r.prefillName(), DecodeWorker: w.name})
		}
	case engine.EventDecodeReserved:
		if r != nil {
			r.st.reserved, r.st.reservedAt, r.st.missing, r.st.decodeWaitMs = true, e.At, e.MissingTokens, e.DurationMs
			c.forensic.record(Event{Name: EventDecodeReserved, AtMs: e.At, RequestID: e.RequestID, TransferID: r.st.tid,
				PrefillWorker: r.prefillName(), DecodeWorker: w.name, MissingTokens: e.MissingTokens, WaitMs: e.DurationMs})
		}
	case engine.EventDestinationCancelled:
		if r != nil {
			r.st.destCancelled = true
		}
	case engine.EventCancelled:
		if r != nil {
			r.st.cancelled = true
			if w == r.prefill {
				r.st.prefillEnded = true
			}
		}
	}
	return after
}

// rememberUnclaimed notes a hold that ended without a transfer start seen,
// forgetting the oldest beyond a bound.
func (c *Cluster) rememberUnclaimed(id uint64) {
	const limit = 4096
	c.unclaimed[id] = true
	c.unclaimedOrder = append(c.unclaimedOrder, id)
	if len(c.unclaimedOrder) > limit {
		delete(c.unclaimed, c.unclaimedOrder[0])
		c.unclaimedOrder = c.unclaimedOrder[1:]
	}
}

// onDecodeArrived is the prefill side's cue that a decode has connected for
// a transfer: start the modeled transfer, or answer ABORT when the hold is
// already gone.
func (c *Cluster) onDecodeArrived(w *workerNode) func(tid, reqID uint64) {
	return func(tid, reqID uint64) {
		c.mu.Lock()
		r := c.transfers[tid]
		tokens, at := 0, 0.0
		if r != nil {
			tokens = engine.TransferTokens(w.args.KVTransferTimingMode, len(r.tokens), r.st.missing)
			// The decode connects once reserved: the claim is stamped at
			// the reservation's modeled time, however long the connection
			// took in wall time.
			at = r.st.reservedAt
			if !r.st.reserved {
				at = c.Now()
			}
		}
		c.mu.Unlock()
		if r == nil || r.id != reqID || c.destFirst {
			// Ended already: the decode got, or gets, the outcome. Or
			// destination-first, where the transfer started with the hold.
			return
		}
		// The transfer time is read from EventTransferStart: the delay
		// returned here also counts the wait for a pass in flight.
		if _, ok := w.live.StartTransferAt(at, r.id, tokens); !ok {
			_ = w.server.Abort(tid)
		}
	}
}

func routerID(id uint64) string { return fmt.Sprintf("req-%d", id) }
