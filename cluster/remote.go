package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/internal/timescale"
	"github.com/kvstrand/mocker/router"
)

// A cluster whose Config has a Transport runs no engine worker itself: its
// loop keeps the router, the handoff machines, forensics and stats, and
// reaches workers in other processes through a Transport (package
// distributed). The transport joins workers as it discovers them, hands
// the loop what they report (Deliver) and takes them away when they are
// lost (Leave). The handoff machine, generate.go and the stats are the
// in-process ones: a remote worker is one more WorkerHandle.
//
// A coupled cluster (TransportConfig.Coupled) also drives its workers'
// clocks. Every command to a worker opens a turn at the loop's now and
// takes a ticket there, so modeled time passes nothing the worker has yet
// to answer; the answer (DeliverTurn) takes the ticket's place, and says
// when the worker's next event is due, which the loop schedules as a run
// of the worker to that instant, another turn. Transfer cues take the
// link's tickets as in an in-process cluster. The loop then sees every
// worker's events in modeled order whatever the wall time between
// processes: the results are the in-process cluster's, and the loop may
// run on virtual time (RunVirtual).

// Transport is a live connection to workers in other processes.
type Transport interface {
	// Close stops the transport and whatever it started (in local mode,
	// the child workers, etcd and NATS). The cluster calls it once, after
	// its loop has ended.
	Close() error
	// Name says which transport this is, for summaries ("local",
	// "etcd+nats").
	Name() string
}

// TransportFactory starts a transport for cfg (cfg.Transport is set) and
// joins the workers it finds to host before it returns, so a cluster that
// New returns has workers to route to.
type TransportFactory func(cfg Config, host *RemoteHost) (Transport, error)

var transports struct {
	mu sync.Mutex
	f  TransportFactory
}

// RegisterTransport installs the factory New uses for a Config with a
// Transport. Package distributed registers itself from its init, so a
// program that imports it can run distributed clusters; the cluster
// package never imports a transport.
func RegisterTransport(f TransportFactory) {
	transports.mu.Lock()
	transports.f = f
	transports.mu.Unlock()
}

func transportFactory() TransportFactory {
	transports.mu.Lock()
	defer transports.mu.Unlock()
	return transports.f
}

// RemoteWorker is what the loop needs of a worker in another process. The
// calls come from the loop's goroutine and must not block on the worker:
// their effects come back through RemoteHost.Deliver.
type RemoteWorker interface {
	// Apply hands in to the worker (at its own now).
	Apply(in engine.Input)
	// OpenRoom opens transfer room tid for request reqID on the worker's
	// transfer server; the worker answers with a RemoteRoom item carrying
	// the handoff params the decode needs.
	OpenRoom(tid, reqID uint64)
	// Connect makes the worker (a decode) connect to the transfer room
	// params name and report the answer as a RemoteStatus item.
	Connect(tid, reqID uint64, params []byte)
	// Turn stamps the commands that follow (until the next Turn or Run)
	// with modeled instant at and turn number turn, for a coupled worker:
	// it applies them at that instant and answers with DeliverTurn.
	Turn(at float64, turn uint64)
	// Run tells a coupled worker to run its engine until modeled instant
	// until and answer with DeliverTurn, as turn turn.
	Run(until float64, turn uint64)
	// Flush sends what the calls above gave the worker since the last
	// Flush. A worker may hold them until then: the loop calls it at the
	// end of each of its turns that gave the worker anything, so that a
	// turn's commands cross to the worker together.
	Flush()
}

// pendingTurn is a coupled worker's turn whose answer the loop waits for.
type pendingTurn struct {
	turn uint64
	t    engine.Ticket
	sent time.Time // wall clock
}

// RemoteInfo describes a worker that joins.
type RemoteInfo struct {
	// Name is the worker's name, unique among the live workers; results
	// and stats name workers by it.
	Name string
	// Role and Args are the worker's; Args.BlockSize, speedup_ratio and
	// the engine must match the cluster's.
	Role engine.WorkerType
	Args engine.Args
	// TransferAddr is a prefill worker's advertised transfer server.
	TransferAddr string
}

// RemoteItem is one thing a remote worker reported, in the order it
// happened there. Exactly one field is set. Times are already on the
// cluster's modeled clock (see RemoteHost.Epoch).
type RemoteItem struct {
	Output  *engine.Output
	Input   *engine.InputResult // Worker is ignored
	Room    *RemoteRoom
	Arrived *RemoteArrived
	Status  *RemoteStatus
}

// RemoteRoom is a prefill worker's answer to OpenRoom.
type RemoteRoom struct {
	TID    uint64
	Params []byte // the vLLM or SGLang handoff params, JSON
	Err    string // the room could not be opened
}

// RemoteArrived is a prefill's transfer server seeing the decode of room
// TID.
type RemoteArrived struct{ TID, ReqID uint64 }

// RemoteStatus is the answer a decode got from the transfer server.
type RemoteStatus struct {
	TID    uint64
	Status handoff.Status
	Err    string
}

// RemoteHost is the cluster as its transport sees it. Its methods are safe
// for concurrent use; they post to the cluster's loop.
type RemoteHost struct{ c *Cluster }

// Epoch is the wall-clock instant of the cluster's modeled time 0, and
// Speedup its speedup_ratio: modeled ms = (wall − Epoch) in ms × Speedup.
// A transport maps its workers' clocks onto this one.
func (h *RemoteHost) Epoch() (time.Time, timescale.Scale) { return h.c.started, h.c.scale }

// Pools are the cluster's pools after defaults: the roles a joining
// worker may have, with the args (block_size, speedup_ratio, engine) it
// must agree with, and the sizes local mode spawns.
func (h *RemoteHost) Pools() []RemotePool {
	out := make([]RemotePool, len(h.c.res.pools))
	for i, p := range h.c.res.pools {
		out[i] = RemotePool{Role: p.role, Workers: p.workers, Args: p.args}
	}
	return out
}

// RemotePool is one pool of the cluster's config.
type RemotePool struct {
	Role    engine.WorkerType
	Workers int
	Args    engine.Args
}

// Join adds a worker to the cluster and its router. It refuses, naming the
// worker, one whose role the cluster does not use, or whose engine,
// block_size, speedup_ratio or dp_size differs from its pool's.
func (h *RemoteHost) Join(info RemoteInfo, w RemoteWorker) error {
	var err error
	ok := h.c.tryQuery(func() { err = h.c.join(info, w) })
	if !ok {
		return errors.New(errClosed)
	}
	return err
}

// Leave takes a lost worker away: out of the router and its indexer, and
// every request in flight on it ends "error" with a message naming it and
// reason.
func (h *RemoteHost) Leave(name, reason string) {
	h.c.post(func() { h.c.leave(name, reason) })
}

// Deliver hands the loop what worker name reported, in order.
func (h *RemoteHost) Deliver(name string, items []RemoteItem) {
	h.c.post(func() { h.c.deliver(name, items) })
}

// DeliverTurn hands the loop a coupled worker's report: its items, the
// last turn it applied, and when its next event is due (nil: none).
func (h *RemoteHost) DeliverTurn(name string, items []RemoteItem, turn uint64, next *float64) {
	h.c.post(func() { h.c.deliverTurn(name, items, turn, next) })
}

// Coupled reports whether the cluster drives its workers' clocks
// (TransportConfig.Coupled): the transport then asks each worker for a
// coupled session and reports with DeliverTurn.
func (h *RemoteHost) Coupled() bool { return h.c.remote.coupled }

// Workers counts the live workers of each role.
func (h *RemoteHost) Workers() map[engine.WorkerType]int {
	n := map[engine.WorkerType]int{}
	h.c.tryQuery(func() {
		for _, w := range h.c.workers {
			if !w.gone {
				n[w.role]++
			}
		}
	})
	return n
}

// post runs fn on the loop without waiting for it.
func (c *Cluster) post(fn func()) {
	c.send(queryMsg{fn: fn, done: make(chan struct{})})
}

// tryQuery runs fn on the loop and waits; false when the loop has ended.
func (c *Cluster) tryQuery(fn func()) bool {
	q := queryMsg{fn: fn, done: make(chan struct{})}
	if !c.send(q) {
		return false
	}
	select {
	case <-q.done:
		return true
	case <-c.done:
		select {
		case <-q.done:
			return true
		default:
			return false
		}
	}
}

// remoteHandle is a remote worker behind the WorkerHandle seam; its
// occupancy is what it last reported.
type remoteHandle struct {
	rw RemoteWorker
	n  *workerNode
	c  *Cluster
	// queued: rw holds commands of the loop's turn (flushRemote).
	queued bool
}

// given marks h as holding commands until the turn's end.
func (h *remoteHandle) given() {
	if !h.queued {
		h.queued = true
		h.c.remote.queued = append(h.c.remote.queued, h)
	}
}

// flushRemote ends a loop turn for the remote workers: each sends what
// the turn gave it, as one message.
func (c *Cluster) flushRemote() {
	if c.remote == nil || len(c.remote.queued) == 0 {
		return
	}
	for i, h := range c.remote.queued {
		h.queued = false
		h.rw.Flush()
		c.remote.queued[i] = nil
	}
	c.remote.queued = c.remote.queued[:0]
}

func (h *remoteHandle) Apply(in engine.Input) {
	h.c.turn(h.n)
	h.rw.Apply(in)
	h.given()
}
func (h *remoteHandle) Metrics() engine.Metrics { return h.n.last }

func (h *remoteHandle) openRoom(tid, reqID uint64) {
	h.c.turn(h.n)
	h.rw.OpenRoom(tid, reqID)
	h.given()
}

func (h *remoteHandle) connect(tid, reqID uint64, params []byte) {
	h.c.turn(h.n)
	h.rw.Connect(tid, reqID, params)
	h.given()
}

// turn opens a turn for a command to coupled worker n at the loop's now:
// a ticket holds modeled time there until the worker answers it. Each
// command has a turn of its own, since the worker may answer one before
// the next reaches it. A run of n queued at this instant comes first, as
// the worker's own events at an instant come before an input scheduled
// there later on one queue: the worker hears the run before the command,
// and the run's answer keeps the run's place.
func (c *Cluster) turn(n *workerNode) {
	if !c.remote.coupled {
		return
	}
	if n.runPending && n.runAt <= c.v.Now() {
		c.sendRun(n)
	}
	n.handle.(*remoteHandle).rw.Turn(c.v.Now(), c.openTurn(n, c.v.Ticket(c.v.Now())))
}

// openTurn numbers n's next turn, whose answer fills ticket t.
func (c *Cluster) openTurn(n *workerNode, t engine.Ticket) uint64 {
	n.turn++
	n.turns = append(n.turns, pendingTurn{turn: n.turn, t: t, sent: time.Now()})
	return n.turn
}

// scheduleRun has coupled worker n run to its next event when the loop
// reaches it. The run takes its place in the queue at once (a call that
// sends it and, right behind, the ticket its answer fills), so the answer
// is handled where one queue would have handled the worker's event. An
// answer that names another next event reschedules it; one that names the
// same keeps the run where it is, made when the worker's answer first
// named it.
func (c *Cluster) scheduleRun(n *workerNode, next *float64) {
	if next != nil && n.runPending && n.runAt == *next && !n.gone {
		return
	}
	c.dropRun(n)
	if next == nil || n.gone {
		return
	}
	gen, at := n.runGen, *next
	c.v.Call(at, func() {
		if n.runGen == gen && !n.gone && !c.ended {
			c.sendRun(n)
		}
	})
	n.runPending, n.runAt, n.runTicket = true, at, c.v.Ticket(at)
}

// sendRun sends n's queued run, at the loop's now, as the turn its ticket
// waits for.
func (c *Cluster) sendRun(n *workerNode) {
	n.runPending = false
	n.runGen++
	h := n.handle.(*remoteHandle)
	h.rw.Run(c.v.Now(), c.openTurn(n, n.runTicket))
	h.given()
}

// dropRun takes n's queued run, if one is not sent yet, out of the queue.
func (c *Cluster) dropRun(n *workerNode) {
	n.runGen++
	if n.runPending {
		n.runPending = false
		c.v.Void(n.runTicket)
	}
}

// deliverTurn folds a coupled worker's report into the loop: the transfer
// cues in it go to their exchanges' tickets, and the rest takes the place
// of the first turn it answers (the later ones it answers are voided).
func (c *Cluster) deliverTurn(name string, items []RemoteItem, turn uint64, next *float64) {
	n := c.liveNode(name)
	if n == nil || c.ended {
		return
	}
	n.heard = time.Now()
	var rest []RemoteItem
	for _, it := range items {
		switch {
		case it.Arrived != nil:
			c.onRemoteLink(it.Arrived.TID, it.Arrived.ReqID, true, linkStatus{})
		case it.Status != nil:
			c.onRemoteLink(it.Status.TID, 0, false, linkStatus{status: it.Status.Status, err: it.Status.Err})
		default:
			rest = append(rest, it)
		}
	}
	i := 0
	for i < len(n.turns) && n.turns[i].turn <= turn {
		i++
	}
	if i == 0 {
		// Nothing waited for this report (a transfer cue alone, or an
		// answer already taken): what else it carries is late news.
		if len(rest) > 0 {
			c.log.Warn("coupled worker reported outside a turn", "worker", name, "turn", turn, "items", len(rest))
			c.applyItems(n, rest)
		}
		c.checkDrained()
		return
	}
	first := n.turns[0].t
	for _, p := range n.turns[1:i] {
		c.v.Void(p.t)
	}
	n.turns = append(n.turns[:0], n.turns[i:]...)
	c.v.FillCall(first, func() {
		c.applyItems(n, rest)
		c.scheduleRun(n, next)
		c.checkDrained()
	})
}

// remoteDriver is what a cluster of remote workers holds beside the
// loop's core: the transport that reaches the workers and the link their
// transfer rooms go through.
type remoteDriver struct {
	coupled      bool // remote workers run on the loop's clock
	link         *remoteLink
	transport    Transport
	nextWorkerID uint64
	// queued are the workers given commands in the loop's turn, which
	// flushRemote sends at its end.
	queued []*remoteHandle
	// stopSince is when a stepped remote cluster first saw a caller's
	// context end while it waited for a worker (zero: none has).
	stopSince time.Time
}

// startRemote finishes New (or NewStepped, for a coupled cluster) for a
// cluster of remote workers: a loop with no engine worker of its own,
// paced against the wall clock (which uncoupled workers pace themselves
// by) unless it runs on virtual time, and the transport.
func (c *Cluster) startRemote() (*Cluster, error) {
	f := transportFactory()
	if f == nil {
		return nil, errors.New("transport: no distributed transport is linked into this program (import github.com/kvstrand/mocker/distributed)")
	}
	coupled := c.cfg.Transport.Coupled
	if c.opts.virtual && !coupled {
		return nil, errors.New("transport: virtual time needs transport.coupled (the cluster then drives the workers' clocks); without it the workers run on the wall clock")
	}
	rl := &remoteLink{c: c, params: map[uint64][]byte{}, waiting: map[uint64]uint64{}, failed: map[uint64]string{}}
	c.remote = &remoteDriver{coupled: coupled, link: rl}
	c.link = rl
	c.v = engine.NewVirtual()
	c.started = time.Now()
	if !c.opts.virtual {
		// The workers take their modeled clocks from the same instant
		// (Epoch).
		c.paced = newPacedDriver(c.scale, c.started)
	}
	// Workers outlive a cluster and may serve several: request and
	// transfer ids start from the clock (a thousand per ms, wrapping after
	// about 11 days, far beyond any tombstone's life), so a later cluster
	// never reuses an id a worker or its transfer server still remembers
	// (a completed room's tombstone refuses a reused id). A coupled
	// session has its workers to itself, and their transfer servers
	// forget their rooms when it starts: its ids start at 1, as in
	// process.
	if !c.remote.coupled {
		base := uint64(c.started.UnixMilli()%1e9) * 1000
		c.nextID, c.nextTID = base, base
	}
	stopStand := func() {}
	if c.stepped != nil {
		stopStand = c.standIn()
	} else {
		go c.run()
	}
	t, err := f(c.cfg, &RemoteHost{c: c})
	stopStand()
	if err != nil {
		c.remote.transport = nil
		_ = c.Close()
		return nil, err
	}
	c.remote.transport = t
	return c, nil
}

// standIn answers the transport of a stepped cluster while it starts: a
// stepped cluster has no loop, so while the transport joins the workers
// it finds, a goroutine handles what it posts in the loop's place; the
// returned func stops it. Afterwards what the transport posts is handled
// at each Settle (and, while a turn is pending, as it comes).
func (c *Cluster) standIn() (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case m := <-c.mail:
				c.stepped.mu.Lock()
				c.handle(m)
				c.stepped.mu.Unlock()
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-stopped
	}
}

// Transport is the distributed transport the cluster runs on; nil for an
// in-process cluster.
func (c *Cluster) Transport() Transport {
	if c.remote == nil {
		return nil
	}
	return c.remote.transport
}

// TransportName names the transport the cluster's workers are reached by:
// "in-process", or the distributed transport's name.
func (c *Cluster) TransportName() string {
	if t := c.Transport(); t != nil {
		return t.Name()
	}
	return "in-process"
}

// join adds a remote worker, on the loop.
func (c *Cluster) join(info RemoteInfo, rw RemoteWorker) error {
	if c.stopping {
		return errors.New(errClosed)
	}
	var p *pool
	for i := range c.res.pools {
		if c.res.pools[i].role == info.Role {
			p = &c.res.pools[i]
		}
	}
	a := info.Args
	switch {
	case p == nil:
		return fmt.Errorf("worker %s refused: role %s, but this cluster's pools are %s", info.Name, info.Role, c.poolRoles())
	case string(a.EngineType) != c.cfg.Engine:
		return fmt.Errorf("worker %s refused: engine %s, but the cluster's is %s", info.Name, a.EngineType, c.cfg.Engine)
	case a.BlockSize != p.args.BlockSize:
		return fmt.Errorf("worker %s refused: block_size %d differs from the cluster's %d", info.Name, a.BlockSize, p.args.BlockSize)
	case scaleOf(a) != c.scale:
		return fmt.Errorf("worker %s refused: speedup_ratio %g differs from the cluster's %g", info.Name, scaleOf(a).Ratio(), c.scale.Ratio())
	case a.DPSize > 1:
		return fmt.Errorf("worker %s refused: dp_size %d; distributed workers run one rank each", info.Name, a.DPSize)
	}
	for _, w := range c.workers {
		if w.name == info.Name && !w.gone {
			return fmt.Errorf("worker %s refused: a live worker already has that name", info.Name)
		}
	}
	n := &workerNode{idx: len(c.workers), name: info.Name, ranks: 1, role: info.Role, id: c.remote.nextWorkerID, args: a, heard: time.Now(),
		transferAddr: info.TransferAddr}
	c.remote.nextWorkerID++
	n.last = engine.Metrics{TotalBlocks: a.NumGPUBlocks, FreeBlocks: a.NumGPUBlocks}
	n.handle = &remoteHandle{rw: rw, n: n, c: c}
	ri := router.WorkerInfo{ID: n.id, Role: router.Role(info.Role), TotalBlocks: a.NumGPUBlocks, BlockSize: a.BlockSize}
	if a.MaxNumBatchedTokens != nil {
		ri.MaxBatchedTokens = *a.MaxNumBatchedTokens
	}
	if err := c.router.AddWorker(ri); err != nil {
		return fmt.Errorf("worker %s: %w", info.Name, err)
	}
	c.workers = append(c.workers, n)
	c.byRole[info.Role] = append(c.byRole[info.Role], n)
	wp := WorkerPoint{Free: n.last.FreeBlocks}
	c.series.cur = append(c.series.cur, wp)
	for i := range c.series.points {
		for len(c.series.points[i].Workers) < len(c.series.cur) {
			c.series.points[i].Workers = append(c.series.points[i].Workers, WorkerPoint{})
		}
	}
	c.log.Info("worker joined", "worker", info.Name, "role", info.Role, "transfer_addr", info.TransferAddr)
	return nil
}

func (c *Cluster) poolRoles() string {
	s := ""
	for i, p := range c.res.pools {
		if i > 0 {
			s += " and "
		}
		s += string(p.role)
	}
	return s
}

func (c *Cluster) liveNode(name string) *workerNode {
	for _, w := range c.workers {
		if w.name == name && !w.gone {
			return w
		}
	}
	return nil
}

// leave removes a lost worker, on the loop. Its requests end now, naming
// it. A surviving prefill that holds KV for a lost decode keeps it until
// its own abort (or session) timeout frees it, as a real source would; a
// surviving side with nothing held is told to drop the request.
func (c *Cluster) leave(name, reason string) {
	n := c.liveNode(name)
	if n == nil {
		return
	}
	n.gone = true
	// A coupled worker's pending turns will not be answered.
	for _, p := range n.turns {
		c.v.Void(p.t)
	}
	n.turns = nil
	c.dropRun(n)
	c.router.RemoveWorker(n.id)
	c.heldNow -= n.last.HeldBlocks
	// What it held is gone with it: drain must not wait for it.
	n.last = engine.Metrics{}
	c.log.Warn("worker lost", "worker", name, "reason", reason)
	msg := fmt.Sprintf("worker %s lost: %s", name, reason)
	for _, r := range c.sortedRequests() {
		if r.prefill != n && r.decode != n {
			continue
		}
		phase := r.machine.Phase()
		if r.decode != n && phase == handoff.Activated {
			continue // a lost prefill: the decode runs it alone now
		}
		if r.prefill != n {
			switch phase {
			case handoff.Held, handoff.Reserved, handoff.Transferring:
				// the source keeps its hold until its own deadline
			default:
				r.prefill.handle.Apply(engine.Cancel{ID: r.id})
			}
		}
		if r.decode != n && r.decode != r.prefill {
			r.decode.handle.Apply(engine.CancelDestination{ID: r.id})
		}
		if r.tid != 0 {
			if x := c.exchange(r.tid); x != nil {
				// Its replies will not come: the tickets they held go.
				if x.t1Open {
					x.t1Open = false
					c.v.Void(x.t1)
				}
				if x.t2Open {
					x.t2Open = false
					c.v.Void(x.t2)
				}
			}
			c.exch.Delete(r.tid)
		}
		c.finish(r, handoff.Errored, msg)
	}
	c.checkDrained()
}

// deliver folds a remote worker's report into the loop, in order.
func (c *Cluster) deliver(name string, items []RemoteItem) {
	n := c.liveNode(name)
	if n == nil || c.ended {
		return
	}
	n.heard = time.Now()
	c.stamp()
	c.applyItems(n, items)
	c.checkDrained()
}

// applyItems applies a remote worker's report items at the loop's now.
func (c *Cluster) applyItems(n *workerNode, items []RemoteItem) {
	for _, it := range items {
		switch {
		case it.Output != nil:
			c.onOutput(n.idx, it.Output)
		case it.Input != nil:
			ir := *it.Input
			ir.Worker = n.idx
			c.onInput(ir)
		case it.Room != nil:
			c.remote.link.roomOpened(n, *it.Room)
		case it.Arrived != nil:
			c.onRemoteLink(it.Arrived.TID, it.Arrived.ReqID, true, linkStatus{})
		case it.Status != nil:
			c.onRemoteLink(it.Status.TID, 0, false, linkStatus{status: it.Status.Status, err: it.Status.Err})
		}
	}
}

// onRemoteLink is onLinkMsg without tickets: a remote worker's clock runs
// on its own, so the loop does not hold modeled time for its replies; they
// take effect when they come. A coupled cluster's replies take tickets as
// an in-process cluster's do.
func (c *Cluster) onRemoteLink(tid, reqID uint64, arrived bool, st linkStatus) {
	if c.remote.coupled {
		c.onLinkMsg(linkMsg{tid: tid, reqID: reqID, arrived: arrived, status: st})
		return
	}
	x := c.exchange(tid)
	if x == nil || (arrived && reqID != x.r.id) {
		return
	}
	if arrived {
		if x.arrived {
			return
		}
		x.arrived = true
		c.feed(x.id, handoff.DecodeArrived{})
		return
	}
	if x.got {
		return
	}
	x.got = true
	if !x.closed && (st.status == handoff.ACK || st.status == handoff.Abort) {
		// The prefill closed the room itself and the decode's answer came
		// before its report of the hold's end: the answer waits for the
		// close (closeRoom), as it follows it on one worker.
		x.status, x.early = handoff.TransferStatus{Status: st.status, Err: st.err}, true
		return
	}
	c.exch.Delete(tid)
	c.feed(x.id, handoff.TransferStatus{Status: st.status, Err: st.err})
}

// remoteLink carries the transfer-room steps to remote workers: rooms live
// on the prefill worker's transfer server, the decode worker connects to
// it over TCP, and each reports what it saw.
type remoteLink struct {
	c       *Cluster
	params  map[uint64][]byte // tid → the params the prefill handed out
	waiting map[uint64]uint64 // tid → request id of a connect waiting for its params
	failed  map[uint64]string // tid → why its room could not be opened
}

func (l *remoteLink) arrived(uint64, uint64) {}

func (l *remoteLink) open(r *request) {
	// The params' token binds the request as well as the transfer.
	r.prefill.handle.(*remoteHandle).openRoom(r.tid, r.id)
}

// close sends nothing: a remote prefill closes a room itself when the
// hold ends, at the engine's instant, and the loop learns of it from the
// hold's end in the prefill's frame.
func (l *remoteLink) close(*request, bool) {}

func (l *remoteLink) connect(r *request) {
	tid, reqID := r.tid, r.id
	if msg, ok := l.failed[tid]; ok {
		l.refuse(tid, msg)
		return
	}
	params, ok := l.params[tid]
	if !ok {
		// The prefill's answer to OpenRoom is still on its way.
		l.waiting[tid] = reqID
		return
	}
	l.dial(tid, reqID, params)
}

func (l *remoteLink) dial(tid, reqID uint64, params []byte) {
	x := l.c.exchange(tid)
	if x == nil {
		return
	}
	d := x.r.decode
	if d.gone {
		return
	}
	d.handle.(*remoteHandle).connect(tid, reqID, params)
}

// refuse answers the decode's connection for tid with an error, as a
// transfer server refusing it would. It runs from the queue, not inside
// the machine step that asked for the connection: a coupled cluster's
// answer takes the ticket the connection holds (a call queued behind that
// ticket would wait for it forever).
func (l *remoteLink) refuse(tid uint64, msg string) {
	if l.c.remote.coupled {
		l.c.onLinkMsg(linkMsg{tid: tid, status: linkStatus{status: handoff.Error, err: msg}})
		return
	}
	l.c.v.Call(l.c.v.Now(), func() {
		l.c.onRemoteLink(tid, 0, false, linkStatus{status: handoff.Error, err: msg})
	})
}

func (l *remoteLink) roomOpened(_ *workerNode, room RemoteRoom) {
	if room.Err != "" {
		msg := "transfer room not opened: " + room.Err
		if _, ok := l.waiting[room.TID]; ok {
			delete(l.waiting, room.TID)
			l.refuse(room.TID, msg)
			return
		}
		l.failed[room.TID] = msg
		return
	}
	l.params[room.TID] = room.Params
	if reqID, ok := l.waiting[room.TID]; ok {
		delete(l.waiting, room.TID)
		l.dial(room.TID, reqID, room.Params)
	}
}

func (l *remoteLink) forget(r *request) {
	tid := r.tid
	delete(l.params, tid)
	delete(l.waiting, tid)
	delete(l.failed, tid)
}

func (l *remoteLink) shutdown() {}

// remoteCloseGrace bounds how long Close waits for remote workers to
// answer the cancellations of the requests in flight before it ends them
// itself.
const remoteCloseGrace = 10 * time.Second

// abandonAfter ends every request still in flight once the grace period
// passes: a worker that stopped answering must not hold Close forever.
func (c *Cluster) abandonAfter(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	c.post(func() {
		for _, r := range c.sortedRequests() {
			c.finish(r, handoff.Errored, errClosed)
		}
	})
}

// remoteStopGrace bounds how long a stopped request (its caller gave up:
// an interrupted run, a scenario's end) waits for its remote worker. A
// worker that keeps its lease but answers nothing (a stopped process, a
// wedged host) would otherwise hold the request, and the paced clock or a
// drain behind it, for as long as the lease lives.
const remoteStopGrace = 5 * time.Second

// watchStopped gives up, once remoteStopGrace has passed, the remote
// workers that stopped request r waits on and that have reported nothing
// since, if r has not ended by then (on the loop of a cluster that is not
// stepped).
func (c *Cluster) watchStopped(r *request) {
	since, id := time.Now(), r.id
	time.AfterFunc(remoteStopGrace, func() {
		c.post(func() {
			for _, r := range c.sortedRequests() {
				if r.id != id {
					continue
				}
				// Only the sides the request still waits on: a decode
				// with no part in it yet has nothing to answer.
				switch r.machine.Phase() {
				case handoff.Routed, handoff.PrefillQueued:
					c.giveUpSilent(since, r.prefill)
				case handoff.Activated:
					c.giveUpSilent(since, r.decode)
				default:
					c.giveUpSilent(since, r.prefill, r.decode)
				}
				return
			}
		})
	})
}

// giveUpSilent removes, as lost, those of nodes that are remote, live and
// have reported nothing since since. Their requests end "error" naming
// them.
func (c *Cluster) giveUpSilent(since time.Time, nodes ...*workerNode) {
	if c.ended {
		return
	}
	for i, n := range nodes {
		if n == nil || n.gone || !n.heard.Before(since) || slices.Contains(nodes[:i], n) {
			continue
		}
		c.leave(n.name, fmt.Sprintf("it answered nothing for %s after its requests were stopped (the run was interrupted or their callers gave up); its lease is alive, so its process may be stopped or wedged", remoteStopGrace))
	}
}

// awaitRemote is a stepped remote cluster's wait for what its workers
// post, while modeled time stands at an instant they have yet to answer.
// Once a caller's context has ended (the run is interrupted), a worker
// that leaves a turn unanswered for remoteStopGrace, counted from the
// later of the turn and that moment, is given up, so that the clock
// moves on.
func (c *Cluster) awaitRemote() {
	c.flushRemote()
	select {
	case m := <-c.mail:
		c.handle(m)
		return
	default:
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m := <-c.mail:
			c.handle(m)
			return
		case <-tick.C:
		}
		if c.remote.stopSince.IsZero() {
			if !c.anyCallerGone() {
				continue
			}
			c.remote.stopSince = time.Now()
		}
		gaveUp := false
		for _, n := range c.workers {
			if n.gone || len(n.turns) == 0 {
				continue
			}
			since := n.turns[0].sent
			if since.Before(c.remote.stopSince) {
				since = c.remote.stopSince
			}
			if time.Since(since) >= remoteStopGrace && n.heard.Before(since) {
				c.giveUpSilent(since, n)
				gaveUp = true
			}
		}
		if gaveUp {
			return
		}
	}
}

// anyCallerGone reports whether the context of a call in flight has
// ended.
func (c *Cluster) anyCallerGone() bool {
	for _, w := range c.stepped.watchList {
		select {
		case <-w.done:
			return true
		default:
		}
	}
	return false
}
