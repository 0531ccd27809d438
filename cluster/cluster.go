package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/internal/spare"
	"github.com/kvstrand/mocker/internal/timescale"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/perf"
	"github.com/kvstrand/mocker/router"
)

// Cluster is a set of mock workers, a router and the prefill workers'
// transfer servers, living in this process on one event loop. Build one
// with New, send requests with Generate from any number of
// goroutines, and end it with Close.
type Cluster struct {
	cfg       Config
	res       resolved
	log       *slog.Logger
	router    *router.Router
	workers   []*workerNode
	byRole    map[engine.WorkerType][]*workerNode
	destFirst bool // SGLang without optimistic prefill: the decode reserves first
	maxPrompt int  // the longest prompt a worker of the first pool can hold
	// acts holds the actions of the machines being stepped (step).
	acts []handoff.Action
	// names names requests for the router.
	names reqNames

	// scale relates the loop's modeled time to the wall clock's; paced
	// holds the loop back to the wall clock (paced.go), and is nil for a
	// loop that runs as fast as the CPU allows.
	scale timescale.Scale
	paced *pacedDriver
	opts  options
	link  transferLink

	// Everything below is owned by the loop goroutine.
	v        *engine.Virtual
	reqs     idtab.Table[*request]
	exch     idtab.Table[*exchange]
	nextID   uint64
	nextTID  uint64
	active   int // requests in flight
	heldNow  int // held blocks across workers, from the last outputs
	stats    counters
	forensic *forensics
	prompts  retiring[promptBuf]
	hashMemo hashMemo
	// runMemo hashes prompts made of runs of equal blocks (a trace's)
	// once a run.
	runMemo  kv.RunMemo
	prefixes prefixMemo
	series   seriesRec
	drainers []func()
	// parked are the split requests whose transfer was handed out and not
	// claimed yet, by transfer id; spent remembers those no longer
	// claimable (pd.go).
	parked   map[uint64]*request
	spent    spentLog
	stopping bool
	// listening is set once a request asked to hear its tokens
	// (Request.OnToken): from then on every output's tokens are looked up
	// for a listener, a cost a run without one does not pay.
	listening bool
	ended     bool // the loop has returned; Stats reads the workers' last reports
	// spareReqs are the records of ended requests, for the next arrivals
	// (see recycle).
	spareReqs retiring[request]
	spareExch spare.List[exchange] // likewise (retireExchange)
	// batch drives a batch run (RunVirtual, RunStream: virtual.go); nil
	// for a cluster its callers drive.
	batch *batchDriver

	// stepped drives a stepped cluster (NewStepped, stepped.go); nil for one
	// whose loop runs on a goroutine of its own.
	stepped *steppedDriver

	// remote reaches the workers of a cluster whose Config has a
	// Transport (remote.go); nil for one whose workers run in process.
	remote *remoteDriver

	mail chan message
	done chan struct{} // the loop has ended

	mu        sync.Mutex
	closed    bool
	closeOnce sync.Once
	closeErr  error

	nowBits  atomic.Uint64 // the loop's modeled now
	nextBits atomic.Uint64 // its next event's time (+Inf: none)
	heldPub  atomic.Int64  // held blocks now, as the loop last published
	peakPub  atomic.Int64  // peak held blocks
	started  time.Time
}

// workerNode is one data-parallel rank of a worker (the worker itself when
// its dp_size is 1) and, for a prefill worker, the worker's transfer
// server, shared by its ranks.
type workerNode struct {
	idx    int
	name   string // the worker's name, shared by its ranks
	rank   int    // data-parallel rank within the worker
	ranks  int    // the worker's dp_size
	role   engine.WorkerType
	id     uint64 // router id, one per rank
	args   engine.Args
	w      *engine.Worker
	handle WorkerHandle // how the loop reaches it
	// viewed: the router reads the worker's KV view, so its KV events do
	// not go to the router.
	viewed bool
	server *bootstrap.Server
	last   engine.Metrics // from its last output
	// gone marks a remote worker that was lost; transferAddr is a remote
	// prefill's advertised transfer server.
	gone         bool
	transferAddr string
	// heard is when a remote worker last reported (wall clock).
	heard time.Time
	// A coupled remote worker's turns: the last one sent, those whose
	// answer the loop waits for (each holds a ticket), and the generation
	// of its scheduled run (an answer that moves it makes the older one
	// stale), with the run's instant and its place in the queue while one
	// is there, not sent yet.
	turn       uint64
	turns      []pendingTurn
	runGen     uint64
	runAt      float64
	runTicket  engine.Ticket
	runPending bool
}

// counters are the cluster-wide aggregates, owned by the loop.
type counters struct {
	requests, completed, aborted, rejected, errored   uint64
	prefillRejections                                 uint64
	pins, holdsReleased, holdsAborted, holdsCancelled uint64
	transfersStarted, transfersDone, transfersLost    uint64
	holdMsTotal, holdMsMax                            float64
	peakHeld                                          int
	causality                                         uint64
	causalityExample                                  string
}

// options are how a cluster runs, apart from its Config.
type options struct {
	virtual     bool // no pacing: as fast as the CPU allows
	memory      bool // transfers through the in-memory link, no sockets
	keepEvents  bool // keep the whole forensic log, not only the recent events
	shareTokens bool // use a request's explicit tokens without copying them
	stepped     bool // no loop goroutine: Settle runs the loop (NewStepped)
	batch       bool // the loop schedules the arrivals (RunVirtual, RunStream)
	// fresh gives every request, call and exchange a record of its own,
	// reusing none of an ended one's: tests compare the two.
	fresh bool
	// kvEvents routes by the workers' KV events replayed into the
	// router's index, where an in-process worker's view would answer:
	// tests compare the two.
	kvEvents bool
	// kvTap, when set, sees every KV event an in-process worker sends, and
	// kvWrap wraps each view before the router gets it: tests check the
	// views against an index fed the events.
	kvTap  func(id uint64, ev kv.Event)
	kvWrap func(id uint64, v router.KVView) router.KVView
}

// New starts a cluster: its workers, the router and a transfer server per
// prefill worker on one event loop paced against the wall clock (modeled
// time = wall time since New × speedup_ratio). An invalid cfg is an error
// naming the field, e.g. "decode.args.num_gpu_blocks: ...".
func New(cfg Config) (*Cluster, error) {
	p, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	return p.New()
}

// New starts the planned cluster as the package's New does, without
// resolving its config again.
func (p Plan) New() (*Cluster, error) { return newCluster(p, options{}) }

// modeledEpoch is the instant modeled time 0 stands for when a component
// that takes a time.Time (the router's TTLs) runs on the modeled clock.
var modeledEpoch = time.Unix(0, 0).UTC()

// newCluster builds the planned cluster to run as opts say.
func newCluster(p Plan, opts options) (*Cluster, error) {
	res := *p.r
	log := res.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The router's TTLs (router_ttl_secs, router_request_ttl_secs) run on
	// the cluster's modeled clock, like every other time in the cluster:
	// the router is only called from the loop, which owns that clock.
	var c *Cluster
	modeled := func() time.Time {
		if c == nil || c.v == nil {
			return modeledEpoch
		}
		return modeledEpoch.Add(time.Duration(c.v.Now() * float64(time.Millisecond)))
	}
	rt, err := router.New(res.router, router.WithLogger(log), router.WithClock(modeled))
	if err != nil {
		return nil, fmt.Errorf("router_options: %w", err)
	}
	c = &Cluster{
		cfg:      res.cfg,
		res:      res,
		log:      log,
		router:   rt,
		byRole:   make(map[engine.WorkerType][]*workerNode),
		scale:    scaleOf(res.pools[0].args),
		forensic: newForensics(log),
		opts:     opts,
		mail:     make(chan message, 1024),
		done:     make(chan struct{}),
	}
	c.nextBits.Store(math.Float64bits(math.Inf(1)))
	// The first pool is the one a request enters (aggregated, or prefill).
	a := res.pools[0].args
	c.maxPrompt = a.NumGPUBlocks * a.BlockSize
	if a.MaxModelLen != nil {
		c.maxPrompt = min(c.maxPrompt, *a.MaxModelLen)
	}
	c.started = time.Now()
	c.forensic.keepAll = opts.keepEvents
	if opts.shareTokens {
		c.hashMemo.byTokens = make(map[tokensKey]*kv.Hashes)
	}
	if c.cfg.Engine == string(engine.EngineSGLang) && !c.res.pools[0].args.SGLang.OptimisticPrefill {
		c.destFirst = true
	}
	// The drivers that do not depend on where the workers run.
	if opts.batch {
		c.batch = &batchDriver{}
	}
	if opts.stepped {
		c.stepped = &steppedDriver{}
	}
	if res.cfg.Transport != nil {
		return c.startRemote()
	}
	if opts.memory {
		c.link = newMemLink(c)
	} else {
		c.link = newTCPLink(c)
	}
	if err := c.startWorkers(!opts.memory); err != nil {
		return nil, errors.Join(err, c.closeServers())
	}
	c.series.cur = make([]WorkerPoint, len(c.workers))
	for i, w := range c.workers {
		c.series.cur[i] = WorkerPoint{Free: w.last.FreeBlocks}
	}
	c.v = engine.NewVirtual(c.engineWorkers()...)
	c.v.OnOutput = c.onOutput
	c.v.OnInput = c.onInput
	for i, n := range c.workers {
		n.handle = &localWorker{v: c.v, idx: i, w: n.w}
		if err := c.viewKV(n, i); err != nil {
			return nil, errors.Join(err, c.closeServers())
		}
	}
	if !opts.virtual {
		c.paced = newPacedDriver(c.scale, time.Now())
	}
	if !opts.stepped {
		go c.run()
	}
	return c, nil
}

func (c *Cluster) engineWorkers() []*engine.Worker {
	ws := make([]*engine.Worker, len(c.workers))
	for i, n := range c.workers {
		ws[i] = n.w
	}
	return ws
}

func (c *Cluster) startWorkers(servers bool) error {
	seq := uint64(0)
	for _, p := range c.res.pools {
		model, err := perf.FromProfile(p.args.PlannerProfileData)
		if err != nil {
			return fmt.Errorf("%s.planner_profile_data: %w", p.path, err)
		}
		for i := range p.workers {
			name := fmt.Sprintf("%s-%d", roleName(p.role), i)
			// One engine worker, router target and KV event stream per
			// data-parallel rank; the ranks share the worker's name and
			// transfer server.
			var server *bootstrap.Server
			for rank := range p.args.DPSize {
				n := &workerNode{idx: len(c.workers), name: name, rank: rank, ranks: p.args.DPSize, role: p.role, id: seq, args: p.args}
				seq++
				n.w, err = engine.New(p.args, model, c.cfg.Seed^(n.id+1)*0x9e3779b97f4a7c15)
				if err != nil {
					return fmt.Errorf("%s: %w", p.path, err)
				}
				// The cluster reads a first token (an aggregated request's
				// prefill is done), and counts the rest from completions.
				if !c.cfg.StreamTokens {
					n.w.ReportFirstTokensOnly()
				}
				// A KV-events listener hears the token ids of the blocks
				// stored (KVPass.Tokens); without one no worker keeps them.
				if c.cfg.OnKVEvents != nil {
					n.w.RecordKVTokens()
				}
				n.last = n.w.Metrics()
				if p.role == engine.WorkerPrefill && servers && rank == 0 {
					server, err = bootstrap.Listen(bootstrap.Config{
						Addr:            c.cfg.TransferHost + ":0",
						AdvertisedHost:  c.cfg.AdvertisedHost,
						OnDecodeArrived: c.link.arrived,
						MaxConns:        c.cfg.TransferMaxConns,
						Logger:          c.log.With("worker", n.name),
					})
					if err != nil {
						return fmt.Errorf("transfer server of %s (transfer_host %q, advertised_host %q): %w",
							n.name, c.cfg.TransferHost, c.cfg.AdvertisedHost, err)
					}
				}
				n.server = server
				info := router.WorkerInfo{ID: n.id, Role: router.Role(p.role), DPRank: uint32(rank),
					TotalBlocks: p.args.NumGPUBlocks, BlockSize: p.args.BlockSize}
				if p.args.MaxNumBatchedTokens != nil {
					info.MaxBatchedTokens = *p.args.MaxNumBatchedTokens
				}
				c.workers = append(c.workers, n)
				c.byRole[p.role] = append(c.byRole[p.role], n)
				if err := c.router.AddWorker(info); err != nil {
					return fmt.Errorf("%s: %w", n.label(), err)
				}
			}
		}
	}
	return nil
}

// label names the rank in messages: the worker's name, with its rank
// when the worker has more than one.
func (n *workerNode) label() string {
	if n.ranks <= 1 {
		return n.name
	}
	return fmt.Sprintf("%s dp_rank %d", n.name, n.rank)
}

func roleName(r engine.WorkerType) string {
	if r == engine.WorkerAggregated {
		return "worker"
	}
	return string(r)
}

// Name is the cluster's name (Config.Name).
func (c *Cluster) Name() string { return c.cfg.Name }

// Scale relates the cluster's modeled time to script time: its workers'
// speedup_ratio.
func (c *Cluster) Scale() timescale.Scale { return c.scale }

// Config is the configuration the cluster runs with, defaults applied.
func (c *Cluster) Config() Config { return c.cfg }

// Now is the cluster's modeled time in ms: where its loop is, moving with
// the wall clock while the loop waits for its next event.
func (c *Cluster) Now() float64 {
	now := math.Float64frombits(c.nowBits.Load())
	if c.paced == nil {
		return now
	}
	next := math.Float64frombits(c.nextBits.Load())
	return max(now, min(c.paced.wallModeled(), next))
}

// HeldBlocks reports the blocks held across the cluster now and at the
// peak, as of the loop's last step: cheap, for sampling.
func (c *Cluster) HeldBlocks() (now, peak int) {
	return int(c.heldPub.Load()), int(c.peakPub.Load())
}

// Close ends every request in flight with outcome "error" ("cluster
// closed") after releasing what it holds, then stops the loop and the
// transfer servers. Close is idempotent and safe to call concurrently with
// Generate.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		if c.stepped != nil {
			c.closeStepped()
		} else {
			if c.remote != nil {
				go c.abandonAfter(remoteCloseGrace)
			}
			c.send(closeMsg{})
		}
		<-c.done
		c.link.shutdown()
		c.closeErr = c.closeServers()
		if c.remote != nil && c.remote.transport != nil {
			c.closeErr = errors.Join(c.closeErr, c.remote.transport.Close())
		}
	})
	return c.closeErr
}

func (c *Cluster) closeServers() error {
	var errs []error
	for _, w := range c.workers {
		if w.server != nil && w.rank == 0 { // the ranks share it
			if err := w.server.Close(); err != nil {
				errs = append(errs, fmt.Errorf("transfer server of %s: %w", w.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reqNames builds the names requests go by in the router's logs,
// "req-<id>", in shared blocks of bytes, so that a name costs no
// allocation of its own. A name's bytes are never written again once
// appended, which is what lets a string point at them.
type reqNames struct{ buf []byte }

func (n *reqNames) name(id uint64) string {
	const longest = len("req-") + 20
	if cap(n.buf)-len(n.buf) < longest {
		n.buf = make([]byte, 0, 4096)
	}
	start := len(n.buf)
	n.buf = strconv.AppendUint(append(n.buf, "req-"...), id, 10)
	return unsafe.String(&n.buf[start], len(n.buf)-start)
}
