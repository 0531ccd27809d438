package router

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvstrand/mocker/internal/spare"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router/indexer"
)

// Errors a caller branches on (with errors.Is).
var (
	// ErrAllBusy rejects a request because every worker of the needed role
	// is over a busy threshold. Dynamo answers it with HTTP 503; retry later.
	// The error returned is a *BusyError naming the role; errors.Is matches
	// it against ErrAllBusy.
	ErrAllBusy = errors.New("all workers busy")
	// ErrNoWorkers rejects a request because no worker of the needed role is
	// registered.
	ErrNoWorkers = errors.New("no workers registered")
)

// BusyError is the refusal Route and RouteDisagg return when every worker
// of Role is over a busy threshold, wrapped with the request id. It names
// the role so a caller can tell a saturated prefill pool (the cascade) from
// a saturated decode pool without reading the workers' state afterwards,
// which may have changed since. errors.Is(err, ErrAllBusy) holds for it.
type BusyError struct {
	// Role is the role with no free worker.
	Role Role
	// Workers is how many workers of Role are registered, all of them busy.
	Workers int
}

// Error says which pool is saturated: "all prefill workers busy", "all
// decode workers busy", or "all workers busy" for aggregated workers.
func (e *BusyError) Error() string {
	if e.Role == RolePrefill || e.Role == RoleDecode {
		return "all " + string(e.Role) + " workers busy"
	}
	return ErrAllBusy.Error()
}

// Is makes errors.Is(err, ErrAllBusy) true for a *BusyError.
func (e *BusyError) Is(target error) bool { return target == ErrAllBusy }

// Request is what the router needs to place one request. Give Tokens, or
// the block hashes if the caller already has them (LocalHashes is enough;
// SeqHashes is then derived).
type Request struct {
	// ID names the request in logs and errors.
	ID     string
	Tokens []uint32
	// LocalHashes and SeqHashes are the prompt's complete blocks. Route fills
	// them in from Tokens when they are empty, so a caller that routes the
	// same request again does not hash twice.
	LocalHashes []kv.LocalHash
	SeqHashes   []kv.SeqHash
	// PromptTokens is the prompt length; 0 means len(Tokens), or the blocks'
	// token count when only hashes are given.
	PromptTokens int
}

// Option customises a Router.
type Option func(*Router)

// WithClock sets the time source for approximate mode's TTLs and for
// router_request_ttl_secs. Tests and virtual-time runs pass their own; the
// default is time.Now. The router reads it before taking its own lock, so
// the clock may take locks held by goroutines that call the router; it
// must not call the router itself.
func WithClock(now func() time.Time) Option { return func(r *Router) { r.now = now } }

// WithLogger sets where the router logs dropped events, expired requests
// and other diagnostics; the default is slog.Default(). The router logs
// only after releasing its lock, so a handler may take locks of its own.
func WithLogger(l *slog.Logger) Option { return func(r *Router) { r.log = l } }

// Stats counts router activity.
type Stats struct {
	Index indexer.Stats
	// Routed counts requests placed (a disaggregated request counts once).
	Routed uint64
	// RejectedBusy counts requests refused with ErrAllBusy.
	RejectedBusy uint64
	// EventsIgnored counts KV events not applied: from workers removed
	// (until they are added again), or any event in approximate mode.
	EventsIgnored uint64
	// EventsEarly counts KV events applied for a worker not registered yet:
	// under a distributed transport events can overtake discovery.
	EventsEarly uint64
	// ExpiredRequests counts requests dropped from load tracking after
	// router_request_ttl_secs without a Free.
	ExpiredRequests uint64
	// EventErrors counts events applied partly or dropped by the index.
	EventErrors uint64
	// LoadsIgnored counts load reports from unknown workers.
	LoadsIgnored uint64
}

type leg struct {
	w      *worker
	tokens int          // pending prefill tokens charged to w
	seqs   []kv.SeqHash // shared blocks charged to w
	blocks int          // unshared blocks charged to w
}

type reqState struct {
	legs [2]leg
	seq  uint64 // tells this request from an earlier one with the same id
	// id is the request's, for logs.
	id string
	// split says legs[0] is a disaggregated prefill, which ends at
	// PrefillDone.
	split bool
	// seqs holds the shared blocks a leg charges. It outlives the request,
	// so the state's next request copies its blocks without allocating.
	seqs []kv.SeqHash
	// start is when the request was routed, for router_request_ttl_secs;
	// older and newer link the requests in flight in the order they were
	// routed (the router's ages list).
	start        time.Time
	older, newer *reqState
}

// maxKeptSeqs bounds the block list a spare state keeps, so one very long
// prompt does not pin its list's memory for good.
const maxKeptSeqs = 4096

// A Lease is a routed request's claim on its workers' load, from
// RouteLease or RouteDisaggLease. PrefillDoneLease and FreeLease end it
// with no lookup, which is what a caller routing at a high rate wants.
// Once its request is freed or expired a lease names nothing, and
// its calls do nothing: the zero Lease is such a lease.
type Lease struct {
	st  *reqState
	seq uint64
}

// live returns the state l names, nil once its request has ended.
func (l Lease) live() *reqState {
	if l.st == nil || l.st.seq != l.seq {
		return nil
	}
	return l.st
}

// Router places requests on workers. It is safe for concurrent use: routing
// decisions, KV events and load reports are serialised by one mutex.
type Router struct {
	mu      sync.Mutex
	cfg     Config
	now     func() time.Time
	log     *slog.Logger
	rng     *rand.Rand
	index   *indexer.Indexer
	approx  *indexer.Approx // non-nil in approximate mode; shares index
	workers map[uint64]*worker
	order   []*worker // registration order, for round-robin and repeatability
	// byRole holds order's workers split by role, still in registration
	// order: with no busy threshold configured, a role's workers are its
	// candidates as they stand, and a route need not visit them.
	byRole [3][]*worker
	// gated says a busy threshold is configured, so a route must check
	// every worker of the role (busy is decided afresh from its loads).
	gated bool
	rr    [3]uint64 // round-robin counters by role
	// blocks holds the active blocks of requests in flight, by sequence
	// hash. Each route adds and each free removes a request's blocks, so
	// the table churns constantly: kv.Index takes that churn with one
	// probe per block and no deleted-slot markers. Nothing iterates it,
	// so its order never reaches a decision.
	blocks kv.Index[blockRefs]
	// mores holds the lists of blocks' further holders; spareMores the
	// numbers of those free for reuse.
	mores      [][]holder
	spareMores []int32
	// slots holds the registered workers by slot, the name the block
	// table gives them; freeSlots the slots of removed workers.
	slots     []*worker
	freeSlots []int32
	// spareStates keeps the states of ended requests for later ones.
	spareStates spare.List[reqState]
	// inflight counts the requests tracked.
	inflight int
	stats    Stats
	// removed holds ids RemoveWorker took out, so their late KV events are
	// dropped; AddWorker of the id lifts it.
	removed map[uint64]struct{}
	// oldest and newest end the list of requests in flight by routing
	// time (reqState.older, newer), for the request TTL: a request leaves
	// it when it is freed, so it holds no one else, and costs no memory of
	// its own.
	oldest, newest *reqState
	reqSeq         uint64
	reqTTL         time.Duration
	// expired collects ids expired under the lock, logged after unlock.
	expired []string

	cands  []*worker
	dcands []*worker
	ties   []*worker
	scores []indexer.Score
}

// New returns a router for cfg, which must be valid.
func New(cfg Config, opts ...Option) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Router{
		cfg:     cfg,
		now:     time.Now,
		log:     slog.Default(),
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		workers: make(map[uint64]*worker),
		removed: make(map[uint64]struct{}),
		reqTTL:  time.Duration(cfg.RouterRequestTTLSecs * float64(time.Second)),
		gated: cfg.ActiveDecodeBlocksThreshold != nil || cfg.ActivePrefillTokensThreshold != nil ||
			cfg.ActivePrefillTokensThresholdFrac != nil,
	}
	if cfg.UseKVEvents {
		r.index = indexer.New()
	} else {
		ttl := time.Duration(cfg.RouterTTLSecs * float64(time.Second))
		a, err := indexer.NewApprox(ttl, cfg.RouterMaxTreeSize)
		if err != nil {
			return nil, fmt.Errorf("router config: %w", err)
		}
		if cfg.RouterPruneTargetRatio != 0 {
			if err := a.SetPruneTargetRatio(cfg.RouterPruneTargetRatio); err != nil {
				return nil, fmt.Errorf("router config: %w", err)
			}
		}
		r.approx, r.index = a, a.Indexer
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// AddWorker registers a worker, or updates its info if already registered
// (discovery announcements are upserts). A new worker starts idle, with
// whatever its KV events sent before registration put in the index. It
// lifts the tombstone of an earlier RemoveWorker of the same id.
func (r *Router) AddWorker(info WorkerInfo) error {
	role, err := info.Role.index()
	if err != nil {
		return fmt.Errorf("add worker %d: %w", info.ID, err)
	}
	if info.BlockSize != 0 && info.BlockSize != r.cfg.BlockSize {
		return fmt.Errorf("add worker %d: block size %d differs from the router's block_size %d; configure both alike",
			info.ID, info.BlockSize, r.cfg.BlockSize)
	}
	if info.TotalBlocks < 0 {
		return fmt.Errorf("add worker %d: total blocks %d must not be negative", info.ID, info.TotalBlocks)
	}
	if info.MaxBatchedTokens < 0 {
		return fmt.Errorf("add worker %d: max batched tokens %d must not be negative (0 means unknown)", info.ID, info.MaxBatchedTokens)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.removed, info.ID)
	if w := r.workers[info.ID]; w != nil {
		if w.role != role {
			w.role = role
			r.splitRoles()
		}
		w.info = info
		return nil
	}
	w := &worker{info: info, role: role}
	if n := len(r.freeSlots); n > 0 {
		w.slot = r.freeSlots[n-1]
		r.freeSlots = r.freeSlots[:n-1]
		r.slots[w.slot] = w
	} else {
		w.slot = int32(len(r.slots))
		r.slots = append(r.slots, w)
	}
	r.workers[info.ID] = w
	r.order = append(r.order, w)
	r.byRole[role] = append(r.byRole[role], w)
	return nil
}

// splitRoles rebuilds byRole from order, after a worker left or changed
// role.
func (r *Router) splitRoles() {
	for i := range r.byRole {
		clear(r.byRole[i])
		r.byRole[i] = r.byRole[i][:0]
	}
	for _, w := range r.order {
		r.byRole[w.role] = append(r.byRole[w.role], w)
	}
}

// RemoveWorker forgets a worker: it leaves rotation, the kv index and load
// tracking at once; requests still in flight on it no longer count anywhere.
// Its KV events arriving later (still in flight on the transport) are
// dropped until AddWorker of the same id. It reports whether the worker
// was registered; an id seen only through early KV events loses them too.
func (r *Router) RemoveWorker(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed[id] = struct{}{}
	w := r.workers[id]
	if w == nil {
		r.unindex(id)
		return false
	}
	// Every request in flight is in the ages list.
	for st, next := r.oldest, (*reqState)(nil); st != nil; st = next {
		next = st.newer
		for i := range st.legs {
			if st.legs[i].w == w {
				r.release(&st.legs[i])
			}
		}
		if st.legs[0].w == nil && st.legs[1].w == nil {
			r.untrack(st)
		}
	}
	delete(r.workers, id)
	r.order = slices.DeleteFunc(r.order, func(x *worker) bool { return x == w })
	r.byRole[w.role] = slices.DeleteFunc(r.byRole[w.role], func(x *worker) bool { return x == w })
	// Its requests released, no block names the slot any more.
	r.slots[w.slot] = nil
	r.freeSlots = append(r.freeSlots, w.slot)
	r.unindex(id)
	return true
}

func (r *Router) unindex(id uint64) {
	if r.approx != nil {
		r.approx.RemoveWorker(id)
	} else {
		r.index.RemoveWorker(id)
	}
}

// KVEvent applies a worker's KV event to the index. Events from a worker
// not registered yet are applied too (a distributed transport may deliver
// them before discovery announces the worker), but the worker is routable
// only once AddWorker registers it. Events from a removed worker, and every
// event in approximate mode, are counted and ignored. It implements
// kv.Sink.
func (r *Router) KVEvent(workerID uint64, ev kv.Event) {
	r.mu.Lock()
	if r.approx != nil || len(r.removed) > 0 && r.isRemoved(workerID) {
		r.stats.EventsIgnored++
		r.mu.Unlock()
		return
	}
	if r.workers[workerID] == nil {
		r.stats.EventsEarly++
	}
	err := r.index.Apply(workerID, ev)
	if err != nil {
		r.stats.EventErrors++
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Debug("kv event not fully applied", "worker", workerID, "event_id", ev.ID, "kind", ev.Kind.String(), "err", err)
	}
}

// KVView answers for one worker what the kv index answers from the
// worker's KV events: how many leading blocks of a request it holds, and
// how many blocks in all. A worker whose cache the router can read at the
// moment of a decision (an in-process cluster's) can offer one, and its
// events then need not reach the router: the index's per-block work on
// every store and eviction is saved. A view must answer exactly as the
// index would, with every event the worker has sent so far applied. The
// router calls it under its lock from whichever goroutine routes or asks
// for a Worker snapshot; the in-process cluster does both only on its
// loop, which owns the workers the views read.
type KVView interface {
	// Depth is how many leading blocks of a request the worker holds,
	// given the request's block hashes: locals and seqs name the same
	// blocks, by their tokens and by their whole prefix.
	Depth(locals []kv.LocalHash, seqs []kv.SeqHash) int
	// Blocks is how many blocks the worker holds.
	Blocks() int
}

// SetKVView makes the router ask v, not the index, about registered worker
// id's blocks; nil goes back to the index. The worker's KV events, if any
// still come, go on into the index, which no longer answers for it. The
// approximate mode (use_kv_events false) learns from its own decisions
// and takes no view.
func (r *Router) SetKVView(id uint64, v KVView) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.approx != nil {
		return fmt.Errorf("kv view of worker %d: the router is in approximate mode (use_kv_events false), which takes none", id)
	}
	w := r.workers[id]
	if w == nil {
		return fmt.Errorf("kv view of worker %d: no such worker; AddWorker it first", id)
	}
	w.view = v
	return nil
}

// isRemoved reports whether RemoveWorker took id out (and no AddWorker
// brought it back). KVEvent asks only when some id was: the common case
// takes no lookup.
func (r *Router) isRemoved(id uint64) bool {
	_, gone := r.removed[id]
	return gone
}

// UpdateLoad records a worker's load report. It implements LoadSink.
func (r *Router) UpdateLoad(workerID uint64, l Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[workerID]
	if w == nil {
		r.stats.LoadsIgnored++
		return
	}
	w.load = l
}

var _ kv.Sink = (*Router)(nil)
var _ LoadSink = (*Router)(nil)

// prepare fills in the request's hashes and prompt length, outside the lock.
func (r *Router) prepare(req *Request) error {
	bs := r.cfg.BlockSize
	switch {
	case len(req.LocalHashes) == 0 && len(req.Tokens) > 0:
		req.LocalHashes, req.SeqHashes = kv.BlockHashes(req.Tokens, bs, req.LocalHashes[:0], req.SeqHashes[:0])
	case len(req.SeqHashes) == 0 && len(req.LocalHashes) > 0:
		var parent kv.SeqHash
		for i, l := range req.LocalHashes {
			s := kv.SeqHash(l)
			if i > 0 {
				s = kv.ChainHash(parent, l)
			}
			req.SeqHashes = append(req.SeqHashes, s)
			parent = s
		}
	case len(req.SeqHashes) != len(req.LocalHashes):
		return fmt.Errorf("route request %q: %d local hashes but %d sequence hashes; give both for every block, or tokens",
			req.ID, len(req.LocalHashes), len(req.SeqHashes))
	}
	if req.PromptTokens == 0 {
		req.PromptTokens = len(req.Tokens)
		if req.PromptTokens == 0 {
			req.PromptTokens = len(req.LocalHashes) * bs
		}
	}
	return nil
}

// RouteLease places an aggregated request on an aggregated worker and
// starts tracking its load there until PrefillDoneLease and FreeLease with
// the lease it returns (the request's ID only names it in logs). It returns
// a *BusyError (ErrAllBusy) when every such worker is busy and
// ErrNoWorkers when there is none.
func (r *Router) RouteLease(req *Request) (uint64, Lease, error) {
	return r.routeLocked(req)
}

func (r *Router) routeLocked(req *Request) (uint64, Lease, error) {
	if err := r.prepare(req); err != nil {
		return 0, Lease{}, err
	}
	now := r.now()
	r.mu.Lock()
	id, l, err := r.route(req, now)
	expired := r.takeExpired()
	r.mu.Unlock()
	r.logExpired(expired)
	return id, l, err
}

func (r *Router) route(req *Request, now time.Time) (uint64, Lease, error) {
	r.expireRequests(now)
	r.expire(now)
	cands, err := r.candidates(RoleAggregated, req, &r.cands)
	if err != nil {
		return 0, Lease{}, err
	}
	w := r.pick(cands, req, r.cfg.PrefillScale(), true, true)
	st := r.newState()
	st.seqs = append(st.seqs[:0], req.SeqHashes...)
	st.legs[0] = leg{w: w, tokens: uncached(req, w.overlap, r.cfg.BlockSize), seqs: st.seqs}
	r.charge(&st.legs[0])
	l := r.track(req.ID, st, now)
	r.learn(w, req, now)
	r.stats.Routed++
	return w.info.ID, l, nil
}

// RouteDisaggLease places a disaggregated request: first a prefill worker
// (in kv mode by prefix overlap and pending prefill), then a decode worker
// by the same mode with the overlap weight at 0 and no block sharing, so kv
// mode balances decode workers by active blocks, as Dynamo does. The
// prefill worker carries the prompt's uncached tokens until
// PrefillDoneLease; the decode worker carries the prompt's blocks until
// FreeLease, both with the lease it returns. If either role has no free
// worker nothing is tracked, and the error names the role: a *BusyError
// (ErrAllBusy) or ErrNoWorkers.
func (r *Router) RouteDisaggLease(req *Request) (prefill, decode uint64, l Lease, err error) {
	return r.routeDisaggLocked(req)
}

func (r *Router) routeDisaggLocked(req *Request) (prefill, decode uint64, l Lease, err error) {
	if err := r.prepare(req); err != nil {
		return 0, 0, Lease{}, err
	}
	now := r.now()
	r.mu.Lock()
	prefill, decode, l, err = r.routeDisagg(req, now)
	expired := r.takeExpired()
	r.mu.Unlock()
	r.logExpired(expired)
	return prefill, decode, l, err
}

func (r *Router) routeDisagg(req *Request, now time.Time) (prefill, decode uint64, l Lease, err error) {
	r.expireRequests(now)
	r.expire(now)
	// Both pools are checked before either pick, so a rejected request
	// leaves no trace: nothing charged, no round-robin turn taken, no
	// random draw spent.
	pcands, err := r.candidates(RolePrefill, req, &r.cands)
	if err != nil {
		return 0, 0, Lease{}, err
	}
	dcands, err := r.candidates(RoleDecode, req, &r.dcands)
	if err != nil {
		return 0, 0, Lease{}, err
	}
	p := r.pick(pcands, req, r.cfg.PrefillScale(), true, true)
	// The decode leg charges blocks, not uncached tokens, and weighs no
	// overlap: its pick needs no index walk.
	d := r.pick(dcands, req, 0, false, false)
	st := r.newState()
	st.legs[0] = leg{w: p, tokens: uncached(req, p.overlap, r.cfg.BlockSize)}
	st.legs[1] = leg{w: d, blocks: len(req.SeqHashes)}
	st.split = true
	r.charge(&st.legs[0])
	r.charge(&st.legs[1])
	l = r.track(req.ID, st, now)
	r.learn(p, req, now)
	r.stats.Routed++
	return p.info.ID, d.info.ID, l, nil
}

// PrefillDoneLease is PrefillDone for a request routed with a lease.
func (r *Router) PrefillDoneLease(l Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := l.live(); st != nil {
		r.prefillDone(st)
	}
}

func (r *Router) prefillDone(st *reqState) {
	for i := range st.legs {
		l := &st.legs[i]
		if l.w == nil {
			continue
		}
		if i == 0 && st.split {
			r.release(l)
			continue
		}
		l.w.prefill -= l.tokens
		l.tokens = 0
	}
	if st.legs[0].w == nil && st.legs[1].w == nil {
		r.untrack(st)
	}
}

// FreeLease is Free for a request routed with a lease.
func (r *Router) FreeLease(l Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := l.live(); st != nil {
		r.free(st)
	}
}

func (r *Router) free(st *reqState) {
	for i := range st.legs {
		if st.legs[i].w != nil {
			r.release(&st.legs[i])
		}
	}
	r.untrack(st)
}

func (r *Router) charge(l *leg) {
	w := l.w
	w.inflight++
	w.prefill += l.tokens
	w.active += l.blocks
	for _, h := range l.seqs {
		r.ref(h, w)
	}
}

func (r *Router) release(l *leg) {
	w := l.w
	w.inflight--
	w.prefill -= l.tokens
	w.active -= l.blocks
	for _, h := range l.seqs {
		r.unref(h, w)
	}
	*l = leg{}
}

func uncached(req *Request, overlap, blockSize int) int {
	return max(req.PromptTokens-overlap*blockSize, 0)
}

// learn records, in approximate mode, that w now caches the request's
// prompt.
func (r *Router) learn(w *worker, req *Request, now time.Time) {
	if r.approx != nil {
		r.approx.Insert(w.info.ID, req.LocalHashes, req.SeqHashes, now)
	}
}

func (r *Router) expire(now time.Time) {
	if r.approx != nil {
		r.approx.Expire(now)
	}
}

// newState returns an unused request state, with no legs, to fill in
// and track.
func (r *Router) newState() *reqState {
	if r.spareStates.Len() == 0 {
		// More requests in flight than ever: states come 64 at a time.
		slab := make([]reqState, 64)
		for i := range slab {
			r.spareStates.Put(&slab[i])
		}
	}
	return r.spareStates.Take()
}

// track starts tracking a routed request, whose state st came from
// newState, and its age.
func (r *Router) track(id string, st *reqState, now time.Time) Lease {
	r.reqSeq++
	st.seq, st.id = r.reqSeq, id
	r.inflight++
	st.start, st.older, st.newer = now, r.newest, nil
	if r.newest != nil {
		r.newest.newer = st
	} else {
		r.oldest = st
	}
	r.newest = st
	return Lease{st: st, seq: st.seq}
}

// untrack stops tracking the request of state st, which no leg charges
// any longer; st is kept for a later request, and its leases go stale
// with the state's seq.
func (r *Router) untrack(st *reqState) {
	r.inflight--
	if st.older != nil {
		st.older.newer = st.newer
	} else {
		r.oldest = st.newer
	}
	if st.newer != nil {
		st.newer.older = st.older
	} else {
		r.newest = st.older
	}
	seqs := st.seqs
	if cap(seqs) > maxKeptSeqs {
		seqs = nil
	}
	*st = reqState{seqs: seqs[:0]}
	r.spareStates.Put(st)
}

// expireRequests drops from load tracking every request routed
// router_request_ttl_secs or more before now, as if freed.
func (r *Router) expireRequests(now time.Time) {
	cutoff := now.Add(-r.reqTTL)
	for st := r.oldest; st != nil && !st.start.After(cutoff); st = r.oldest {
		r.expired = append(r.expired, st.id)
		r.free(st) // unlinks st
		r.stats.ExpiredRequests++
	}
}

func (r *Router) takeExpired() []string {
	ids := r.expired
	r.expired = nil
	return ids
}

// logExpired reports requests the TTL dropped; it runs after unlock.
func (r *Router) logExpired(ids []string) {
	if len(ids) == 0 {
		return
	}
	const show = 8
	r.log.Warn("router: requests expired without Free; their load is no longer counted",
		"count", len(ids), "router_request_ttl_secs", r.cfg.RouterRequestTTLSecs, "request_ids", ids[:min(len(ids), show)])
}

// busy reports whether w is over a configured threshold. It is stateless,
// decided afresh on each call: for blocks, busy while either the worker's
// reported router-facing count or the router's own prediction is over the
// limit, and free as soon as both are at or under it. (Dynamo's monitor
// words this as a latch set by either value and cleared by both; with no
// memory of its own the two say the same.)
func (r *Router) busy(w *worker) bool {
	if t := r.cfg.ActiveDecodeBlocksThreshold; t != nil {
		total := w.load.TotalBlocks
		if total == 0 {
			total = w.info.TotalBlocks
		}
		if total > 0 {
			limit := *t * float64(total)
			if float64(w.load.RouterActiveBlocks) > limit || float64(w.active) > limit {
				return true
			}
		}
	}
	if t := r.cfg.ActivePrefillTokensThreshold; t != nil && int64(w.prefill) > *t {
		return true
	}
	if f := r.cfg.ActivePrefillTokensThresholdFrac; f != nil {
		mbt := w.info.MaxBatchedTokens
		if mbt == 0 {
			mbt = DefaultMaxBatchedTokens
		}
		if float64(w.prefill) > *f*float64(mbt) {
			return true
		}
	}
	return false
}

// candidates returns the free workers of role, in registration order.
// With no busy threshold configured every worker is free, and it returns
// the role's own list, which the caller must not change, without visiting
// it. Otherwise it fills *dst, checking each worker.
func (r *Router) candidates(role Role, req *Request, dst *[]*worker) ([]*worker, error) {
	ri, _ := role.index()
	if !r.gated {
		if len(r.byRole[ri]) == 0 {
			return nil, fmt.Errorf("route request %q: %w with role %s", req.ID, ErrNoWorkers, role)
		}
		return r.byRole[ri], nil
	}
	cands := (*dst)[:0]
	for _, w := range r.byRole[ri] {
		if !r.busy(w) {
			cands = append(cands, w)
		}
	}
	*dst = cands
	switch total := len(r.byRole[ri]); {
	case total == 0:
		return nil, fmt.Errorf("route request %q: %w with role %s", req.ID, ErrNoWorkers, role)
	case len(cands) == 0:
		r.stats.RejectedBusy++
		return nil, fmt.Errorf("route request %q: %w: %d %s workers, each over a busy threshold; retry later",
			req.ID, &BusyError{Role: role, Workers: total}, total, role)
	}
	return cands, nil
}

// Worker returns a snapshot of one registered worker.
func (r *Router) Worker(id uint64) (WorkerState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return WorkerState{}, false
	}
	return r.snapshot(w), true
}

// Workers returns a snapshot of every registered worker, sorted by id.
func (r *Router) Workers() []WorkerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]WorkerState, 0, len(r.order))
	for _, w := range r.order {
		out = append(out, r.snapshot(w))
	}
	slices.SortFunc(out, func(a, b WorkerState) int { return cmp.Compare(a.Info.ID, b.Info.ID) })
	return out
}

func (r *Router) snapshot(w *worker) WorkerState {
	return WorkerState{
		Info:          w.info,
		InFlight:      w.inflight,
		PrefillTokens: w.prefill,
		ActiveBlocks:  w.active,
		Load:          w.load,
		TreeSize:      r.treeSize(w),
		KVView:        w.view != nil,
		Busy:          r.busy(w),
	}
}

// InFlight returns how many requests the router is tracking.
func (r *Router) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Index = r.index.Stats()
	return s
}
