package distributed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/internal/timescale"
)

func init() { cluster.RegisterTransport(Start) }

// routerPendingBytes bounds the frames a router's subscription holds
// before its loop takes them.
const routerPendingBytes = 256 << 20

// attachWait bounds how long a cluster attaching to running workers waits
// for one worker of each of its pools to be registered.
const attachWait = 10 * time.Second

// Start is the cluster.TransportFactory: it attaches the cluster to the
// workers registered under cfg.Transport's namespace, or in local mode
// first starts etcd, NATS and the pools as child processes.
func Start(cfg cluster.Config, host *cluster.RemoteHost) (cluster.Transport, error) {
	tc := cfg.Transport
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if tc.Local {
		return startLocal(cfg, host, log)
	}
	t, err := attach(host, tc, log)
	if err != nil {
		return nil, err
	}
	t.name = "etcd+nats"
	if err := t.await(attachWait, func(n map[engine.WorkerType]int) bool {
		for _, p := range host.Pools() {
			// A coupled cluster starts with its pools whole: the workers
			// that join later join at no instant a run could repeat.
			if n[p.Role] == 0 || host.Coupled() && n[p.Role] < p.Workers {
				return false
			}
		}
		return true
	}, nil); err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

// transport is the router side: it watches the namespace's registrations
// in etcd, joins and removes workers in the cluster, sends their commands
// and hands their frames to the cluster's loop.
type transport struct {
	host *cluster.RemoteHost
	log  *slog.Logger
	name string
	ns   string
	etcd string // the endpoints, for messages
	ec   *clientv3.Client
	nc   *nats.Conn
	// publish is nc.Publish (a test records what a session sends).
	publish func(subject string, data []byte) error
	sub     *nats.Subscription
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	epoch   time.Time
	scale   timescale.Scale

	mu      sync.Mutex
	workers map[int64]*remote
	refused map[string]string // worker name → why it was refused
	// leaving are the workers whose registration is gone and whose
	// departure is on its way (del); rejoins the registrations that came
	// meanwhile under their names (a worker that lost its lease and
	// registered again), joined once the departure is through.
	leaving map[int64]bool
	rejoins map[string]stagedWorker
	// staged holds a coupled cluster's first workers until all have
	// registered; they then join in name order, so that the router sees
	// them in the same order on every run (ties in routing go by it).
	staging bool
	staged  map[int64]stagedWorker
	local   *localServices
	closed  bool
	// lease is the router's lease id, under which its key lives (plane.RouterKey)
	// and which its sessions' hellos carry; router is the lease it serves
	// under: after a lost lease, lease is the new one at once, router
	// only once every worker has joined again under it.
	lease  clientv3.LeaseID
	router clientv3.LeaseID
	// rejoining, when set, runs between a worker's leaving and its
	// joining again (a test widens the gap).
	rejoining func()
	// plane is the router's key pair (plane.KeyPair); leaveID and leaveKey seal
	// the departure markers it sends itself; rejected counts the frames
	// dropped at its gate (gate.go), workerRejected the commands each
	// worker says it dropped.
	plane          plane.KeyPair
	leaveID        uint64
	leaveKey       []byte
	rejected       plane.Rejections
	workerRejected map[string]uint64

	// busy are the sessions with something to retry (remote.due): the
	// ticker visits those only, so an idle worker costs the router no
	// work per tick. Taken after a remote's mu, never before.
	busyMu sync.Mutex
	busy   map[*remote]struct{}
}

// remote is one worker as the router reaches it: one session of the
// reliable request plane (plane.Command).
type remote struct {
	t       *transport
	reg     plane.Registration
	args    engine.Args
	shift   float64 // ms to add to the worker's modeled times
	session uint64
	key     []byte     // the session's MAC key
	mac     *plane.MAC // key, kept ready
	// coupled: the worker runs on the cluster's clock; at and turn stamp
	// the commands sent until the next Turn.
	coupled bool
	at      float64
	turn    uint64

	mu sync.Mutex
	// Commands.
	seq     uint64    // the last command Seq given
	unacked []pending // sent, not yet acknowledged, in Seq order
	// queue holds the commands given since the last flush: the loop's
	// turn sends them as one message (Flush), under one MAC.
	queue []plane.Command
	body  []byte // the message body being built, reused
	// sealed is the body sealed for publishing, reused: publish (NATS's
	// Publish) copies it before it returns, and w.mu is held.
	sealed []byte
	// Frames.
	based   bool                    // next is known (the session's first ack said From)
	next    uint64                  // the frame Seq to apply next
	held    map[uint64]*plane.Frame // arrived ahead of next
	head    uint64                  // the worker's Head, as last heard
	acked   uint64                  // the frame ack last sent
	ackedAt time.Time
	askedAt time.Time // the last resend request
	gone    bool      // given up or left: send nothing more
	listed  bool      // in t.busy
}

// pending is a command awaiting its ack.
type pending struct {
	c  plane.Command
	at time.Time // when it was last published
}

// stagedWorker is a registration waiting for its coupled cluster's start.
type stagedWorker struct {
	reg  plane.Registration
	args engine.Args
}

func attach(host *cluster.RemoteHost, tc *cluster.TransportConfig, log *slog.Logger) (*transport, error) {
	etcd, natsURL, ns := tc.Etcd, tc.NATS, tc.NamespaceOrDefault()
	ctx, cancel := context.WithCancel(context.Background())
	t := &transport{host: host, log: log, ns: ns, etcd: plane.RedactedURLs(etcd), ctx: ctx, cancel: cancel,
		workers: map[int64]*remote{}, refused: map[string]string{}, leaving: map[int64]bool{}, rejoins: map[string]stagedWorker{}, staging: host.Coupled(), staged: map[int64]stagedWorker{},
		leaveID: plane.NewSessionID(), leaveKey: plane.NewMACKey(), workerRejected: map[string]uint64{}, busy: map[*remote]struct{}{}}
	t.epoch, t.scale = host.Epoch()
	var err error
	if t.plane, err = plane.NewKeyPair(); err != nil {
		cancel()
		return nil, err
	}
	if t.ec, err = plane.DialEtcd(ctx, etcd, tc.EtcdAuth); err != nil {
		cancel()
		return nil, err
	}
	ka, err := t.register()
	if err != nil {
		cancel()
		_ = t.ec.Close()
		return nil, err
	}
	t.wg.Add(1)
	go t.keep(ka)
	if t.nc, err = plane.DialNATS(natsURL, "mocker-router", tc.NATSAuth, nats.ReconnectHandler(func(*nats.Conn) { t.reconnected() })); err != nil {
		_ = t.Close()
		return nil, err
	}
	// Subscribe before listing, so no frame of a worker found by the list
	// is missed.
	t.publish = t.nc.Publish
	t.sub, err = t.nc.Subscribe(plane.OutWildcard(ns), t.onFrame)
	if err == nil {
		// Bounded, so a flood on the bus cannot grow the router without
		// end; a frame dropped past it is asked for again like one NATS
		// lost.
		err = t.sub.SetPendingLimits(-1, routerPendingBytes)
	}
	if err == nil {
		err = t.nc.Flush()
	}
	if err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("nats %s: subscribe: %w", cluster.RedactURL(natsURL), err)
	}
	lctx, lcancel := context.WithTimeout(ctx, plane.DialTimeout)
	resp, err := t.ec.Get(lctx, plane.RegistrationPrefix(ns), clientv3.WithPrefix())
	lcancel()
	if err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("etcd %s: list %s: %w", t.etcd, plane.RegistrationPrefix(ns), err)
	}
	for _, kv := range resp.Kvs {
		t.put(kv)
	}
	t.wg.Add(2)
	go t.watch(resp.Header.Revision + 1)
	go t.tick()
	return t, nil
}

// register grants the router a lease, writes its key under it and keeps
// it alive (until t.ctx ends): workers withdraw the requests of a router
// whose key is gone.
func (t *transport) register() (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithTimeout(t.ctx, plane.DialTimeout)
	defer cancel()
	lease, err := t.ec.Grant(ctx, plane.LeaseTTLSeconds)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: router lease: %w", t.etcd, err)
	}
	host, _ := os.Hostname()
	rec, err := json.Marshal(plane.RouterRegistration{RouterID: int64(lease.ID), Host: host, PID: os.Getpid(), StartedUnixNano: time.Now().UnixNano(),
		PlaneKey: t.plane.Public()})
	if err != nil {
		return nil, err
	}
	key := plane.RouterKey(t.ns, int64(lease.ID))
	if _, err := t.ec.Put(ctx, key, string(rec), clientv3.WithLease(lease.ID)); err != nil {
		return nil, fmt.Errorf("etcd %s: put %s: %w", t.etcd, key, err)
	}
	ka, err := t.ec.KeepAlive(t.ctx, lease.ID)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: router keep-alive: %w", t.etcd, err)
	}
	t.mu.Lock()
	t.lease = lease.ID
	if t.router == 0 {
		t.router = lease.ID
	}
	t.mu.Unlock()
	return ka, nil
}

// keep drains the router's keep-alive responses until the transport
// closes. A lease that ends first (etcd unreachable for longer than its
// TTL) has its workers withdraw the router's requests: the router
// registers again, and each session ends as when frames are lost for
// good, so those requests end "error" saying why and the workers join
// again under sessions the new lease names.
func (t *transport) keep(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer t.wg.Done()
	for {
		for range ka {
		}
		if t.stopping() {
			return
		}
		t.mu.Lock()
		old := t.lease
		t.mu.Unlock()
		reason := fmt.Sprintf("the router's etcd lease %x ended (etcd %s unreachable past its %d s TTL), so its workers withdrew its requests", int64(old), t.etcd, plane.LeaseTTLSeconds)
		t.log.Error("router lease lost; its requests end and it registers again", "reason", reason)
		for {
			var err error
			if ka, err = t.register(); err == nil {
				break
			}
			t.log.Warn("router not registered again; retrying", "err", err)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		t.mu.Lock()
		ids := make(map[int64]*remote, len(t.workers))
		maps.Copy(ids, t.workers)
		t.mu.Unlock()
		for id, w := range ids {
			t.giveUp(id, w, reason)
		}
		// Only now: a request that finds the router registered again
		// finds its workers joined again too.
		t.mu.Lock()
		t.router = t.lease
		t.mu.Unlock()
	}
}

// stopping reports whether the transport is closing.
func (t *transport) stopping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed || t.ctx.Err() != nil
}

// Name is the transport's name for summaries.
func (t *transport) Name() string {
	if t.host.Coupled() {
		return t.name + " (coupled)"
	}
	return t.name
}

// await waits until ok holds for the live workers, up to d; failed, when
// set, reports a reason to stop waiting early (a child worker exited).
func (t *transport) await(d time.Duration, ok func(map[engine.WorkerType]int) bool, failed func() error) error {
	deadline := time.Now().Add(d)
	for {
		n := t.counts()
		if ok(n) {
			if t.staging {
				t.joinStaged()
				continue // the joins may have been refused
			}
			return nil
		}
		if failed != nil {
			if err := failed(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			var want []string
			for _, p := range t.host.Pools() {
				want = append(want, fmt.Sprintf("%s %d of %d", p.Role, n[p.Role], p.Workers))
			}
			msg := fmt.Sprintf("transport: workers registered in namespace %q at etcd %s after %s: %s",
				t.ns, t.etcd, d, strings.Join(want, ", "))
			t.mu.Lock()
			names := make([]string, 0, len(t.refused))
			for name := range t.refused {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				msg += "; " + t.refused[name]
			}
			t.mu.Unlock()
			return errors.New(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watch follows the registrations from rev until the transport closes.
func (t *transport) watch(rev int64) {
	defer t.wg.Done()
	plane.WatchPrefix(t.ctx, t.ec, plane.RegistrationPrefix(t.ns), rev, t.log, func(ev *clientv3.Event) {
		switch ev.Type {
		case mvccpb.PUT:
			t.put(ev.Kv)
		case mvccpb.DELETE:
			t.del(string(ev.Kv.Key))
		}
	})
}

// put joins a newly registered worker. Only a registration under the
// lease its instance id names counts: a key written without it would
// outlive its writer, and name a worker that may not be there.
func (t *transport) put(kv *mvccpb.KeyValue) {
	var reg plane.Registration
	if err := json.Unmarshal(kv.Value, &reg); err != nil {
		t.log.Warn("unreadable registration", "key", string(kv.Key), "err", err)
		return
	}
	if id, err := plane.InstanceOfKey(string(kv.Key)); err != nil || kv.Lease == 0 || kv.Lease != reg.InstanceID || id != reg.InstanceID {
		t.log.Warn("registration ignored: not under the lease its instance_id names", "key", string(kv.Key),
			"instance_id", fmt.Sprintf("%x", reg.InstanceID), "lease", fmt.Sprintf("%x", kv.Lease))
		return
	}
	if reg.PlaneKey == "" || reg.CmdSubject != plane.CmdSubject(t.ns, reg.InstanceID) || reg.OutSubject != plane.OutSubject(t.ns, reg.InstanceID) {
		t.log.Warn("registration ignored: no plane_key, or subjects not its own (a worker of an older mocker?)", "key", string(kv.Key))
		return
	}
	var args engine.Args
	if err := json.Unmarshal(reg.Args, &args); err != nil {
		t.log.Warn("unreadable registration args", "worker", reg.Name, "err", err)
		return
	}
	t.mu.Lock()
	if t.staging {
		t.staged[reg.InstanceID] = stagedWorker{reg: reg, args: args}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.join(reg, args)
}

// counts is the live workers of each role, or while a coupled cluster
// starts, the staged ones.
func (t *transport) counts() map[engine.WorkerType]int {
	t.mu.Lock()
	if t.staging {
		n := map[engine.WorkerType]int{}
		for _, s := range t.staged {
			n[s.reg.Role]++
		}
		t.mu.Unlock()
		return n
	}
	t.mu.Unlock()
	return t.host.Workers()
}

// joinStaged ends a coupled cluster's staging: the staged workers join in
// name order, and later ones as they come.
func (t *transport) joinStaged() {
	t.mu.Lock()
	staged := slices.SortedFunc(maps.Values(t.staged), func(a, b stagedWorker) int { return strings.Compare(a.reg.Name, b.reg.Name) })
	t.staged, t.staging = nil, false
	t.mu.Unlock()
	for _, s := range staged {
		t.join(s.reg, s.args)
	}
}

// join starts a session with a registered worker and joins it to the
// cluster.
func (t *transport) join(reg plane.Registration, args engine.Args) {
	t.mu.Lock()
	if _, ok := t.workers[reg.InstanceID]; ok || t.closed {
		t.mu.Unlock()
		return
	}
	for id := range t.leaving {
		if w := t.workers[id]; w != nil && w.reg.Name == reg.Name {
			// Its former self is still leaving the cluster: it joins
			// once that is done (leave).
			t.rejoins[reg.Name] = stagedWorker{reg: reg, args: args}
			t.mu.Unlock()
			return
		}
	}
	// The worker's modeled clock started at its epoch; both run at the
	// same speedup (Join refuses another), so its times map onto the
	// cluster's by a constant shift.
	// A coupled worker starts a fresh engine on the cluster's clock: no
	// shift.
	coupled := t.host.Coupled()
	shift := t.scale.Modeled(time.Unix(0, reg.EpochUnixNano).Sub(t.epoch))
	if coupled {
		shift = 0
	}
	router := t.lease
	session := plane.NewSessionID()
	key, err := t.plane.SessionKey(reg.PlaneKey, t.ns, reg.InstanceID, int64(router), session)
	if err != nil {
		t.mu.Unlock()
		t.log.Warn("worker ignored: its plane_key is unusable", "worker", reg.Name, "err", err)
		return
	}
	w := &remote{t: t, reg: reg, args: args, shift: shift, session: session, key: key, mac: plane.NewMAC(key), held: map[uint64]*plane.Frame{}, coupled: coupled}
	t.workers[reg.InstanceID] = w
	t.mu.Unlock()
	// The session's first command: its ack says where its frames start,
	// and it names the router, whose key's end ends the session.
	w.send(plane.Command{Op: plane.OpHello, Router: int64(router), Coupled: coupled})
	w.Flush()
	err = t.host.Join(cluster.RemoteInfo{Name: reg.Name, Role: reg.Role, Args: args, TransferAddr: reg.TransferAddr}, w)
	if err != nil {
		t.log.Warn("worker refused", "worker", reg.Name, "err", err)
		w.end()
		t.mu.Lock()
		delete(t.workers, reg.InstanceID)
		t.refused[reg.Name] = err.Error()
		t.mu.Unlock()
		return
	}
	t.mu.Lock()
	delete(t.refused, reg.Name)
	t.mu.Unlock()
}

// del removes a worker whose registration is gone: its lease ended.
func (t *transport) del(key string) {
	id, err := plane.InstanceOfKey(key)
	if err != nil {
		return
	}
	t.mu.Lock()
	if t.staging {
		delete(t.staged, id)
	}
	w := t.workers[id]
	if w != nil {
		t.leaving[id] = true
	}
	for name, r := range t.rejoins {
		if r.reg.InstanceID == id {
			delete(t.rejoins, name)
		}
	}
	t.mu.Unlock()
	if w == nil {
		return
	}
	reason := fmt.Sprintf("its etcd registration is gone (instance %x: lease revoked or expired)", id)
	// Leave through the worker's own frame stream, behind its last
	// frames; directly if the marker does not come back (NATS is down).
	body, _ := plane.EncodeFrame(&plane.Frame{Leave: reason})
	data := plane.Seal(plane.DirFrame, w.reg.OutSubject, body, plane.Keyed{ID: t.leaveID, Key: t.leaveKey})
	if err := t.nc.Publish(w.reg.OutSubject, data); err != nil {
		t.leave(id, reason)
		return
	}
	time.AfterFunc(leaveMarkerWait, func() { t.leave(id, reason) })
}

// leaveMarkerWait bounds how long a departure waits for its marker.
const leaveMarkerWait = 2 * time.Second

// leave removes worker id once, whichever of the marker and the timer
// comes first.
func (t *transport) leave(id int64, reason string) {
	t.mu.Lock()
	w := t.workers[id]
	delete(t.workers, id)
	delete(t.leaving, id)
	closed := t.closed
	var rejoin stagedWorker
	var rejoins bool
	if w != nil {
		rejoin, rejoins = t.rejoins[w.reg.Name]
		delete(t.rejoins, w.reg.Name)
	}
	t.mu.Unlock()
	if w != nil {
		w.end()
	}
	if w != nil && !closed {
		t.host.Leave(w.reg.Name, reason)
	}
	if rejoins {
		t.join(rejoin.reg, rejoin.args)
	}
}

// onFrame takes one worker frame off NATS. NATS runs it on the
// subscription's one goroutine, so frames are handed to the cluster's
// loop in the order onFrame releases them: by Seq, each once (plane.Frame).
func (t *transport) onFrame(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 4 {
		return
	}
	id, err := plane.InstanceOfKey(parts[2])
	if err != nil {
		return
	}
	t.mu.Lock()
	w := t.workers[id]
	t.mu.Unlock()
	if w == nil {
		return
	}
	f, ok := t.openFrame(w, m.Subject, m.Data)
	if !ok {
		return
	}
	if f.Leave != "" {
		t.leave(id, f.Leave)
		return
	}
	if r := f.Refused; r != nil {
		if r.Session == w.session {
			t.log.Error("worker refused the router's session", "worker", w.reg.Name, "reason", r.Reason)
			t.mu.Lock()
			if t.workers[id] == w {
				delete(t.workers, id)
			}
			t.refused[w.reg.Name] = r.Reason
			closed := t.closed
			t.mu.Unlock()
			w.end()
			if !closed {
				t.host.Leave(w.reg.Name, r.Reason)
			}
		}
		return
	}
	if f.Rejected > 0 {
		t.mu.Lock()
		t.workerRejected[w.reg.Name] = max(t.workerRejected[w.reg.Name], f.Rejected)
		t.mu.Unlock()
	}
	if e := f.Ended; e != nil {
		if e.Session == w.session {
			t.log.Error("worker ended the router's session; its requests end and it joins again", "worker", w.reg.Name, "reason", e.Reason)
			t.giveUp(id, w, e.Reason)
		}
		return
	}
	ready, lost := w.take(f, time.Now())
	for _, f := range ready {
		items, err := plane.RemoteItems(f, w.shift)
		if err != nil {
			t.log.Warn("bad frame", "worker", w.reg.Name, "seq", f.Seq, "err", err)
			continue
		}
		if w.coupled {
			next := f.Next
			if next != nil {
				at := *next + w.shift
				next = &at
			}
			t.host.DeliverTurn(w.reg.Name, items, f.Turn, next)
			continue
		}
		t.host.Deliver(w.reg.Name, items)
	}
	if lost != nil {
		reason := fmt.Sprintf("frames %d to %d of its reports were lost on NATS and are no longer in its resend buffer", lost.From, lost.Oldest-1)
		t.log.Error("worker reports lost for good; its requests end and it joins again", "worker", w.reg.Name, "reason", reason)
		t.giveUp(id, w, reason)
	}
}

// take folds a frame into the session and returns the frames now ready to
// apply, in Seq order, and what the worker could not resend.
func (w *remote) take(f *plane.Frame, now time.Time) ([]*plane.Frame, *plane.LostFrames) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.listLocked()
	if w.gone {
		return nil, nil
	}
	for _, a := range f.Acks {
		if a.Session != w.session {
			continue
		}
		i := 0
		for i < len(w.unacked) && w.unacked[i].c.Seq <= a.Seq {
			i++
		}
		w.unacked = w.unacked[i:]
		if !w.based {
			w.based, w.next = true, a.From
		}
	}
	w.head = max(w.head, f.Head)
	if (len(f.Items) > 0 || f.Turn > 0) && (!w.based || f.Seq >= w.next) {
		w.held[f.Seq] = f
		w.head = max(w.head, f.Seq+1)
	}
	var ready []*plane.Frame
	if w.based {
		for seq := range w.held {
			if seq < w.next {
				delete(w.held, seq) // before the session began
			}
		}
		for {
			f, ok := w.held[w.next]
			if !ok {
				break
			}
			delete(w.held, w.next)
			ready = append(ready, f)
			w.next++
		}
		if w.next < w.head && now.Sub(w.askedAt) >= plane.RetransmitAfter/4 {
			// A gap: ask at once, then at most every RetransmitAfter/4
			// while frames keep coming past it.
			w.t.log.Warn("frames missing; asking the worker again", "worker", w.reg.Name, "from_seq", w.next, "head", w.head)
			w.resendLocked(now)
		}
	}
	// A loss the router no longer needs (its frames came since) is stale.
	if l := f.Lost; l != nil && l.Session == w.session && w.based && l.From >= w.next {
		return ready, l
	}
	return ready, nil
}

// giveUp ends a session the router can no longer trust (frames lost for
// good, or its own etcd lease ended): the requests on the worker end
// "error" with reason, the worker withdraws them (bye), and it joins
// again under a new session.
func (t *transport) giveUp(id int64, w *remote, reason string) {
	t.mu.Lock()
	if t.workers[id] == w {
		delete(t.workers, id)
	}
	closed := t.closed
	t.mu.Unlock()
	w.end()
	if closed {
		return
	}
	t.host.Leave(w.reg.Name, reason)
	t.mu.Lock()
	rejoining := t.rejoining
	t.mu.Unlock()
	if rejoining != nil {
		rejoining()
	}
	t.join(w.reg, w.args)
}

// send queues a numbered command of the session for the next flush and
// keeps it until the worker acknowledges it.
func (w *remote) send(c plane.Command) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return
	}
	w.seq++
	c.Session, c.Seq = w.session, w.seq
	if w.coupled && c.Op != plane.OpHello {
		c.At, c.Turn = w.at, w.turn
	}
	w.unacked = append(w.unacked, pending{c: c, at: time.Now()})
	w.queue = append(w.queue, c)
	w.listLocked()
}

// due reports whether the session has something retry may have to do: a
// command awaiting its ack, frames missing, or frames applied and not yet
// acknowledged.
func (w *remote) dueLocked() bool {
	return !w.gone && (len(w.unacked) > 0 || w.based && (w.next < w.head || w.acked < w.next))
}

// listLocked puts the session in the ticker's busy set when it is due,
// and takes it out when not.
func (w *remote) listLocked() {
	due := w.dueLocked()
	if due == w.listed {
		return
	}
	w.listed = due
	t := w.t
	t.busyMu.Lock()
	if due {
		if t.busy == nil {
			t.busy = map[*remote]struct{}{}
		}
		t.busy[w] = struct{}{}
	} else {
		delete(t.busy, w)
	}
	t.busyMu.Unlock()
}

// Flush publishes the queued commands: the cluster's loop calls it at the
// end of each turn in which it gave the worker commands, so a turn's
// commands cost the worker one message, one MAC and one wake-up.
func (w *remote) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
}

// commandBatchBytes is the body past which a flush starts another
// message, well under NATS's payload limit (1 MiB by default): a turn
// that hands a worker many long prompts sends several messages. A
// command larger than this goes alone, as it would unbatched.
const commandBatchBytes = 64 << 10

// publishLocked queues c and flushes: a control command (resend, ack,
// goodbye) goes at once, with whatever the turn had queued.
func (w *remote) publishLocked(c plane.Command) {
	w.queue = append(w.queue, c)
	w.flushLocked()
}

// flushLocked publishes the queue in as few messages as fit
// commandBatchBytes, each command carrying the frame ack.
func (w *remote) flushLocked() {
	if len(w.queue) == 0 {
		return
	}
	var ack uint64
	if w.based {
		ack = w.next
		w.acked, w.ackedAt = w.next, time.Now()
	}
	body := w.body[:0]
	for i := range w.queue {
		c := &w.queue[i]
		c.Session, c.Ack = w.session, ack
		if len(body) > 0 && len(body)+4*len(c.Tokens)+len(c.Params) > commandBatchBytes {
			w.publishBody(body)
			body = body[:0]
		}
		var err error
		if body, err = plane.AppendCommand(body, c); err != nil {
			w.t.log.Error("command not encoded", "worker", w.reg.Name, "op", c.Op, "err", err)
		}
		*c = plane.Command{} // the queue keeps no tokens
	}
	w.publishBody(body)
	w.queue, w.body = w.queue[:0], body[:0]
}

// publishBody seals and publishes one command message.
func (w *remote) publishBody(body []byte) {
	if len(body) == 0 {
		return
	}
	w.sealed = plane.AppendSeal(w.sealed[:0], plane.DirCommand, w.reg.CmdSubject, body, plane.Keyed{ID: w.session, MAC: w.mac})
	if err := w.t.publish(w.reg.CmdSubject, w.sealed); err != nil {
		w.t.log.Warn("commands not sent", "worker", w.reg.Name, "err", err)
	}
}

// resendLocked asks the worker for its frames from next on.
func (w *remote) resendLocked(now time.Time) {
	w.askedAt = now
	w.publishLocked(plane.Command{Op: plane.OpResend, From: w.next})
}

// retry publishes again what went unanswered: every unacknowledged
// command once the oldest has waited RetransmitAfter (or at once when
// force: NATS came back), a resend request while frames are missing, and
// an ack of the frames applied when nothing else carried it.
func (w *remote) retry(now time.Time, force bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.listLocked()
	if w.gone {
		return
	}
	// A turn's commands go at its end (Flush); this only sends what a
	// cluster with no turn to end yet (a stepped one, between its steps)
	// left queued.
	w.flushLocked()
	if len(w.unacked) > 0 && (force || now.Sub(w.unacked[0].at) >= plane.RetransmitAfter) {
		if !force {
			w.t.log.Warn("commands unacknowledged; publishing them again", "worker", w.reg.Name,
				"from_seq", w.unacked[0].c.Seq, "count", len(w.unacked))
		}
		for i := range w.unacked {
			w.unacked[i].at = now
			w.queue = append(w.queue, w.unacked[i].c)
		}
		w.flushLocked()
	}
	switch {
	case !w.based:
	case force || (w.next < w.head && now.Sub(w.askedAt) >= plane.RetransmitAfter):
		w.resendLocked(now)
	case w.acked < w.next && now.Sub(w.ackedAt) >= plane.AckEvery:
		w.publishLocked(plane.Command{Op: plane.OpAck})
	}
}

// end closes the session: nothing more is sent but a goodbye, so the
// worker forgets it.
func (w *remote) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return
	}
	w.publishLocked(plane.Command{Op: plane.OpBye})
	w.gone = true
	w.unacked, w.held = nil, nil
	w.listLocked()
}

// tick drives the retries of the sessions with something to retry until
// the transport closes.
func (t *transport) tick() {
	defer t.wg.Done()
	tk := time.NewTicker(plane.RetransmitAfter / 5)
	defer tk.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case now := <-tk.C:
			t.busyMu.Lock()
			due := slices.Collect(maps.Keys(t.busy))
			t.busyMu.Unlock()
			for _, w := range due {
				w.retry(now, false)
			}
		}
	}
}

// reconnected runs when the router's NATS connection is back: whatever
// was published while it was away may be lost, so every session asks
// again at once.
func (t *transport) reconnected() {
	t.log.Warn("NATS connection back; publishing unacknowledged commands again and asking for missed frames")
	now := time.Now()
	for _, w := range t.remotes() {
		w.retry(now, true)
	}
}

func (t *transport) remotes() []*remote {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*remote, 0, len(t.workers))
	for _, w := range t.workers {
		out = append(out, w)
	}
	return out
}

// Apply sends an engine input.
func (w *remote) Apply(in engine.Input) { w.send(plane.CommandOf(in)) }

// OpenRoom asks the prefill for a transfer room.
func (w *remote) OpenRoom(tid, reqID uint64) {
	w.send(plane.Command{Op: plane.OpOpenRoom, TID: tid, ID: reqID})
}

// Connect makes the decode dial the source's transfer room.
func (w *remote) Connect(tid, reqID uint64, params []byte) {
	w.send(plane.Command{Op: plane.OpConnect, TID: tid, ID: reqID, Params: params})
}

// Turn stamps the commands that follow for a coupled worker.
func (w *remote) Turn(at float64, turn uint64) {
	w.mu.Lock()
	w.at, w.turn = at, turn
	w.mu.Unlock()
}

// Run has a coupled worker run its engine until until, as turn turn.
func (w *remote) Run(until float64, turn uint64) {
	w.Turn(until, turn)
	w.send(plane.Command{Op: plane.OpRun, Until: until})
}

// Close stops watching and subscribing, then whatever local mode started.
func (t *transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	for _, w := range t.remotes() {
		w.end()
	}
	if t.nc != nil {
		_ = t.nc.FlushTimeout(time.Second) // the goodbyes
	}
	t.mu.Lock()
	lease := t.lease
	t.mu.Unlock()
	if lease != 0 {
		// The workers have the goodbyes; the key's end says it again.
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = t.ec.Revoke(rctx, lease)
		rcancel()
	}
	t.cancel()
	t.wg.Wait()
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
	if t.nc != nil {
		t.nc.Close()
	}
	var errs []error
	if t.ec != nil {
		_ = t.ec.Close() // only says the watch was cancelled
	}
	if t.local != nil {
		errs = append(errs, t.local.close())
	}
	return errors.Join(errs...)
}
