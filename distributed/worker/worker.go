package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/internal/timescale"
	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/perf"
	"github.com/kvstrand/mocker/transfer"
)

// Config is one `mocker worker` process.
type Config struct {
	// Name is the worker's name among the namespace's workers; default
	// "{role}-{host}-{pid}".
	Name   string
	Role   engine.WorkerType
	Engine string // vllm | sglang | trtllm
	// Namespace scopes keys and subjects; default cluster.DefaultNamespace.
	Namespace string
	Etcd      []string
	NATS      string
	// NATSAuth and EtcdAuth are the credentials and TLS files the worker
	// presents; empty secrets are taken from the environment (auth.go).
	NATSAuth cluster.NATSAuth
	EtcdAuth cluster.EtcdAuth
	// Args are engine arguments, a JSON object of Dynamo's MockEngineArgs
	// keys, over the defaults mocker.cluster() uses (block_size 16,
	// num_gpu_blocks 1024, speedup_ratio 10).
	Args []byte
	// ListenHost is what the transfer server binds; AdvertiseHost what
	// decode workers dial (required when ListenHost is 0.0.0.0 or ::).
	ListenHost, AdvertiseHost string
	// DrainTimeout bounds how long a stopping worker waits for its work to
	// end before it leaves anyway; default 30 s.
	DrainTimeout time.Duration
	// MaxRooms bounds the transfer rooms a prefill worker keeps open at
	// once (handoffs whose decode has not connected and finished yet); a
	// handoff past it ends its request with an error naming the bound.
	// 0 means bootstrap.DefaultMaxRooms.
	MaxRooms int
	// NoEventPlane leaves Dynamo's event plane (KV events and load on
	// namespace.{ns}.…) unpublished: for a worker whose NATS nobody else
	// can read, such as local mode's, whose server takes only the run's
	// own random credentials. mocker's router reads none of it (it takes
	// the same events from the frames).
	NoEventPlane bool
	// Seed drives the engine's output tokens.
	Seed   uint64
	Logger *slog.Logger
}

// ResolveArgs resolves cfg's engine args as the cluster resolves a pool's
// (cluster.WorkerArgs): the same defaults, page-size rule and bounds.
func ResolveArgs(cfg Config) (engine.Args, error) {
	var m map[string]any
	if len(cfg.Args) > 0 {
		dec := json.NewDecoder(bytes.NewReader(cfg.Args))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil || m == nil {
			return engine.Args{}, fmt.Errorf("--args: want a JSON object of engine args such as {\"num_gpu_blocks\": 512}: %w", cmp.Or(err, errors.New("got null")))
		}
	}
	a, err := cluster.WorkerArgs(cfg.Engine, cfg.Role, m)
	if err != nil {
		// The cluster names a key by its layer, "args.KEY"; here the
		// layer is the flag.
		if rest, ok := strings.CutPrefix(err.Error(), "args."); ok {
			return a, fmt.Errorf("--args: %s", rest)
		}
		return a, fmt.Errorf("--args: %w", err)
	}
	if a.DPSize > 1 {
		return a, fmt.Errorf("--args: dp_size %d: a distributed worker runs one rank; start one worker per rank", a.DPSize)
	}
	return a, nil
}

// Run runs one worker until ctx ends, then drains it (new work is
// refused, what it has finishes or times out) and leaves: its lease is
// revoked, so its keys go at once. A lease lost on the way (revoked, or
// expired while etcd was out of reach) ends the sessions it carried, and
// the worker registers again under a new lease. It returns an error only
// when it cannot start (bad args, etcd or NATS unreachable: the message
// names the URL).
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch cfg.Role {
	case engine.WorkerPrefill, engine.WorkerDecode, engine.WorkerAggregated:
	default:
		return usage(fmt.Errorf("--role: %q; want prefill, decode or aggregated", cfg.Role))
	}
	if cfg.DrainTimeout < 0 {
		return usage(fmt.Errorf("--drain-timeout: %s; want 0 (the default, 30s) or more", cfg.DrainTimeout))
	}
	if cfg.Engine == "" {
		cfg.Engine = string(engine.EngineVLLM)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = cluster.DefaultNamespace
	}
	tc := cluster.TransportConfig{Etcd: cfg.Etcd, NATS: cfg.NATS, Namespace: cfg.Namespace, NATSAuth: cfg.NATSAuth, EtcdAuth: cfg.EtcdAuth}
	if err := tc.Validate(); err != nil {
		return usage(err)
	}
	if err := checkWorkerArgs(cfg.Args); err != nil {
		return usage(err)
	}
	args, err := ResolveArgs(cfg)
	if err != nil {
		return usage(err)
	}
	model, err := perf.FromProfile(args.PlannerProfileData)
	if err != nil {
		return fmt.Errorf("--args: planner_profile_data: %w", err)
	}
	ew, err := engine.New(args, model, cfg.Seed)
	if err != nil {
		return fmt.Errorf("--args: %w", err)
	}
	if cfg.ListenHost == "" {
		cfg.ListenHost = "127.0.0.1"
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%s-%d", cfg.Role, host, os.Getpid())
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	log = log.With("worker", cfg.Name)

	ec, err := plane.DialEtcd(ctx, cfg.Etcd, cfg.EtcdAuth)
	if err != nil {
		return err
	}
	defer ec.Close()
	in := make(chan workerMsg, 4096)
	// Back on NATS, the worker tells its routers its Head at once, so
	// frames lost while it was away are asked for without waiting.
	nc, err := plane.DialNATS(cfg.NATS, cfg.Name, cfg.NATSAuth, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case in <- workerMsg{reconnected: true}:
		default: // the loop is busy; its heartbeat will do
		}
	}))
	if err != nil {
		return err
	}
	defer nc.Close()

	planeKey, err := plane.NewKeyPair()
	if err != nil {
		return err
	}
	l := &workerLoop{cfg: cfg, args: args, log: log, nc: nc, in: in,
		events: plane.EventPublisher{ID: rand.Uint64(), LastLoad: -1},
		kvSubj: plane.KvEventsSubject(cfg.Namespace, cfg.Role), loadSubj: plane.MetricsSubject(cfg.Namespace, cfg.Role),
		seq: 1, inbox: newInbox(), sent: frameBuffer{next: 1}, plane: planeKey, routers: map[int64]string{}, prefills: map[int64]string{}, rooms: sessionRooms{}, holds: newHoldRooms()}
	l.newEngine = func() (*engine.Worker, error) { return engine.New(args, model, cfg.Seed) }
	l.setEngine(ew, 0)
	if cfg.Role == engine.WorkerPrefill {
		l.server, err = bootstrap.Listen(bootstrap.Config{
			Addr:            net.JoinHostPort(cfg.ListenHost, "0"),
			AdvertisedHost:  cfg.AdvertiseHost,
			MaxRooms:        cfg.MaxRooms,
			OnDecodeArrived: func(tid, reqID uint64) { l.post(workerMsg{arrived: &plane.WireArrived{TID: tid, ReqID: reqID}}) },
			Logger:          log,
		})
		if err != nil {
			return fmt.Errorf("transfer server (--listen-host %q, --advertise-host %q): %w", cfg.ListenHost, cfg.AdvertiseHost, err)
		}
		defer l.server.Close()
	}

	// A worker answers each input as it comes: it runs no instant
	// early.
	l.pace = timescale.NewPacer(0)
	l.scale = timescale.New(args.SpeedupRatio)
	l.ec = ec
	if err := l.join(ctx); err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, plane.DialTimeout)
	routers, err := ec.Get(gctx, plane.RouterPrefix(cfg.Namespace), clientv3.WithPrefix())
	cancel()
	if err != nil {
		l.leave()
		return fmt.Errorf("etcd %s: list %s: %w", plane.RedactedURLs(cfg.Etcd), plane.RouterPrefix(cfg.Namespace), err)
	}
	for _, kv := range routers.Kvs {
		if r, ok := routerOf(kv, log); ok {
			l.routers[r.id] = r.key
		}
	}
	watchCtx, watchStop := context.WithCancel(context.Background())
	defer watchStop()
	if cfg.Role == engine.WorkerDecode {
		rev, err := l.listPrefills(ctx)
		if err != nil {
			l.leave()
			return err
		}
		l.wg.Add(1)
		go l.watchPrefills(watchCtx, rev)
	}
	l.wg.Add(1)
	go l.watchRouters(watchCtx, ec, routers.Header.Revision+1)

	runErr := l.run(ctx)

	// Leave: the lease's revocation removes every key at once. The last
	// frames reach the NATS server first, so they come before the
	// departure at a router.
	_ = nc.Flush()
	l.leave()
	watchStop()
	l.wg.Wait()
	_ = nc.Flush()
	return runErr
}

// registration is the etcd lease a worker is registered under, whose id
// is its instance id (as in Dynamo), the subjects that go with it and
// its command subscription.
type registration struct {
	lease            clientv3.LeaseID
	id               int64
	cmdSubj, outSubj string
	sub              *nats.Subscription
	// stop ends the lease's keep-alive; lost closes when the keep-alive
	// ends: stopped, or the lease revoked or expired (etcd out of reach
	// for longer than its TTL).
	stop context.CancelFunc
	lost chan struct{}
}

// join registers the worker under a new lease, before its loop runs.
func (l *workerLoop) join(ctx context.Context) error {
	reg, err := l.enroll(ctx, func(*registration) bool { return true })
	if err != nil {
		return err
	}
	l.adopt(reg)
	l.reg = reg
	return nil
}

// adopt makes reg's instance id and subjects the worker's.
func (l *workerLoop) adopt(reg *registration) {
	l.id, l.cmdSubj, l.outSubj = reg.id, reg.cmdSubj, reg.outSubj
}

// enroll registers the worker under a new lease: the instance id, and
// with it the subjects, are the lease's. It touches none of the loop's
// state, so it may run off the loop: once the lease is granted, its
// command subscription made and its keep-alive running, and before the
// keys that let a router find it are written, it hands the registration
// to subjects (the loop must know the new command subject before any
// command can come on it); subjects returns false when nobody takes it
// any more. It undoes what it did when a step fails.
func (l *workerLoop) enroll(ctx context.Context, subjects func(*registration) bool) (reg *registration, err error) {
	cfg := l.cfg
	gctx, cancel := context.WithTimeout(ctx, plane.DialTimeout)
	lease, err := l.ec.Grant(gctx, plane.LeaseTTLSeconds)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd %s: lease: %w", plane.RedactedURLs(cfg.Etcd), err)
	}
	id := int64(lease.ID)
	reg = &registration{lease: lease.ID, id: id, cmdSubj: plane.CmdSubject(cfg.Namespace, id),
		outSubj: plane.OutSubject(cfg.Namespace, id), lost: make(chan struct{})}
	defer func() {
		if err != nil {
			l.drop(reg, true)
		}
	}()
	reg.sub, err = l.nc.Subscribe(reg.cmdSubj, func(m *nats.Msg) {
		// Checked on the loop, which holds the session keys (gate.go).
		l.post(workerMsg{sealed: m.Data, subject: m.Subject})
	})
	if err != nil {
		return nil, fmt.Errorf("nats %s: subscribe: %w", cluster.RedactURL(cfg.NATS), err)
	}
	if err := l.nc.Flush(); err != nil {
		return nil, fmt.Errorf("nats %s: %w", cluster.RedactURL(cfg.NATS), err)
	}
	kaCtx, kaStop := context.WithCancel(context.Background())
	reg.stop = kaStop
	ka, err := l.ec.KeepAlive(kaCtx, lease.ID)
	if err != nil {
		close(reg.lost)
		return nil, fmt.Errorf("etcd %s: keep-alive: %w", plane.RedactedURLs(cfg.Etcd), err)
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for range ka {
		}
		close(reg.lost)
	}()
	if !subjects(reg) {
		return nil, context.Canceled
	}
	if err := l.register(ctx, l.ec, reg); err != nil {
		return nil, err
	}
	l.log.Info("worker registered", "instance_id", fmt.Sprintf("%x", id), "role", cfg.Role, "transfer_addr", l.transferAddr())
	return reg, nil
}

// drop ends reg: its subscription and keep-alive, and with revoke its
// lease (and so every key under it).
func (l *workerLoop) drop(reg *registration, revoke bool) {
	if reg.sub != nil {
		_ = reg.sub.Unsubscribe()
	}
	if revoke {
		rctx, cancel := context.WithTimeout(context.Background(), plane.DialTimeout)
		_, _ = l.ec.Revoke(rctx, reg.lease)
		cancel()
	}
	if reg.stop != nil {
		reg.stop()
		<-reg.lost
	}
}

// leave revokes the worker's registration, if it has one.
func (l *workerLoop) leave() {
	if l.reg != nil {
		l.drop(l.reg, true)
		l.reg = nil
	}
}

// The attempts of a worker whose lease was lost to register again are
// spaced rejoinFirst apart, twice as far after each failure up to
// rejoinMost, each wait moved by up to a quarter either way so that
// workers cut off together do not come back in step.
const (
	rejoinFirst = 500 * time.Millisecond
	rejoinMost  = 8 * time.Second
)

// rejoinNote is what a re-registration tells the loop: the new
// registration's subjects before its keys are written, then, done, the
// registration itself, which the loop owns from then on.
type rejoinNote struct {
	reg  *registration
	done bool
}

// leaseLost ends what the lost registration carried: every router
// session (bound to the old instance id: its router already ends its
// requests, having seen the key go) is told, forgotten and withdrawn, so
// none keeps KV for nobody. It returns the lost registration, which the
// re-registration revokes (rejoin).
func (l *workerLoop) leaseLost() *registration {
	l.sendWaiting()
	old := l.reg
	l.reg = nil
	l.log.Warn("etcd lease lost (revoked, or etcd out of reach past its TTL); registering again under a new lease",
		"instance_id", fmt.Sprintf("%x", l.id))
	reason := fmt.Sprintf("the worker's etcd lease %x ended, so it withdrew its requests and registers again under a new lease", l.id)
	for _, session := range l.inbox.sessionList() {
		key := plane.Keyed{ID: session, Key: l.inbox.key(session)}
		l.inbox.forget(session)
		l.control(plane.Frame{Ended: &plane.SessionEnded{Session: session, Reason: reason}}, key)
		l.withdraw(session)
		l.uncouple(session)
	}
	// Commands still on their way to the old subject are not taken.
	l.cmdSubj = ""
	return old
}

// rejoin runs off the loop, so that etcd out of reach holds up no
// request the worker runs: it revokes the lost registration old, in
// case it still lives (its keys must go before the new ones come, for a
// router that watches them), then registers again until it succeeds or
// ctx ends, one attempt at a time, and tells the loop on notes. Whatever
// the loop did not take is undone.
func (l *workerLoop) rejoin(ctx context.Context, old *registration, notes chan<- rejoinNote) {
	defer l.wg.Done()
	l.drop(old, true)
	tell := func(n rejoinNote) bool {
		if ctx.Err() != nil {
			return false
		}
		select {
		case notes <- n:
			return true
		case <-ctx.Done():
			return false
		}
	}
	jitter := rand.New(rand.NewPCG(l.cfg.Seed, uint64(old.lease)))
	wait := rejoinFirst
	for attempt := 1; ctx.Err() == nil; attempt++ {
		reg, err := l.enroll(ctx, func(reg *registration) bool { return tell(rejoinNote{reg: reg}) })
		if err == nil {
			if !tell(rejoinNote{reg: reg, done: true}) {
				l.drop(reg, true)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		d := time.Duration(float64(wait) * (0.75 + 0.5*jitter.Float64()))
		l.log.Warn("not registered again yet; trying again", "attempt", attempt, "in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, rejoinMost)
	}
}

// workerMsg is what reaches the worker's loop: a command, a transfer
// server's cue, a decode's answer, or news that NATS is back.
type workerMsg struct {
	sealed      []byte // a command as it came off NATS
	subject     string // and its subject
	arrived     *plane.WireArrived
	status      *plane.WireStatus
	reconnected bool
	routerGone  int64 // a router's key in etcd is gone
	routerUp    *routerUp
	prefillUp   *prefillUp // a prefill registered (decode workers watch)
	prefillGone int64      // a registration is gone
	refused     *unadvertised
}

// workerLoop owns the engine worker: its own discrete-event queue paced
// against the wall clock (modeled = wall since start × speedup_ratio), as
// the in-process cluster's loop paces its workers.
type workerLoop struct {
	cfg  Config
	args engine.Args
	log  *slog.Logger
	nc   *nats.Conn
	// sealed is the buffer each published message is sealed into: the
	// loop publishes one at a time and Publish copies it, so it is reused.
	sealed []byte
	ec     *clientv3.Client
	// reg is the worker's registration, nil while it has none (its
	// lease was lost and it has not registered again yet); id is its
	// instance id (or the last one's), the subjects its.
	reg     *registration
	id      int64
	outSubj string
	cmdSubj string
	v       *engine.Virtual
	w       *engine.Worker
	server  *bootstrap.Server
	client  bootstrap.Client
	// pace holds the worker's queue back to the wall clock from its
	// start (its epoch), on its scale.
	pace    *timescale.Pacer
	scale   timescale.Scale
	in      chan workerMsg
	wg      sync.WaitGroup
	cctx    context.Context // cancels pending decode connections
	ccancel context.CancelFunc

	seq      uint64      // the next frame's Seq
	inbox    *inbox      // the routers' command streams
	owned    owners      // the live requests each session submitted
	sent     frameBuffer // the last frames, for resending
	items    []plane.Item
	draining bool
	// coupled is the session whose router drives this worker's clock (0:
	// none, the wall clock does); turn is the last of its turns applied,
	// answered the last one reported.
	coupled   uint64
	turn      uint64
	answered  uint64
	newEngine func() (*engine.Worker, error)
	events    plane.EventPublisher // Dynamo's event plane
	kvSubj    string
	loadSubj  string
	rooms     sessionRooms // the prefill's open rooms, by session
	holds     holdRooms    // the prefill's holds and their rooms, by request
	// plane is the worker's key pair, routers the public keys of the
	// namespace's registered routers by lease id, rejected what the
	// worker dropped (gate.go).
	plane   plane.KeyPair
	routers map[int64]string
	// prefills are the transfer addresses of the namespace's registered
	// prefill workers by instance id, the only ones a decode dials
	// (prefills.go).
	prefills map[int64]string
	rejected plane.Rejections
	// ackTimer runs while acks, or outputs that report only a load, wait
	// for a frame to carry them (flush): when it fires first they go in a
	// frame of their own.
	ackTimer *time.Timer
	ackArmed bool
	// batch is the buffer a command message is decoded into (gate.go).
	batch []plane.Command
}

func (l *workerLoop) post(m workerMsg) { l.in <- m }

// setEngine makes ew the worker's engine, its clock at modeled ms at.
func (l *workerLoop) setEngine(ew *engine.Worker, at float64) {
	// A router hears of first tokens only (plane.OutputOf).
	ew.ReportFirstTokensOnly()
	l.w = ew
	l.v = engine.NewVirtual(ew)
	l.v.OnOutput = l.onOutput
	l.v.OnInput = l.onInput
	l.v.AdvanceTo(at)
}

func (l *workerLoop) transferAddr() string {
	if l.server == nil {
		return ""
	}
	return l.server.AdvertisedAddr()
}

// register writes the keys that make reg's instance known.
func (l *workerLoop) register(ctx context.Context, ec *clientv3.Client, r *registration) error {
	ns, role, id, lease := l.cfg.Namespace, l.cfg.Role, r.id, r.lease
	argsJSON, err := json.Marshal(l.args)
	if err != nil {
		return err
	}
	reg := plane.Registration{InstanceID: id, Name: l.cfg.Name, Role: role, Engine: l.cfg.Engine, Namespace: ns, Args: argsJSON,
		EpochUnixNano: l.pace.Start().UnixNano(), CmdSubject: r.cmdSubj, OutSubject: r.outSubj,
		TransferAddr: l.transferAddr(), PID: os.Getpid(), PlaneKey: l.plane.Public()}
	regJSON, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	ep, err := plane.EndpointValue(ns, role, id)
	if err != nil {
		return err
	}
	host, port := "", 0
	if l.server != nil {
		host, port = l.server.AdvertisedHost(), l.server.Port()
	}
	mdc, err := plane.ModelValue(ns, role, id, l.args, host, port)
	if err != nil {
		return err
	}
	channel, err := json.Marshal(map[string]any{
		"type":        "EventChannel",
		"scope":       map[string]any{"kind": "component", "namespace": ns, "component": plane.ComponentOf(role)},
		"topic":       plane.TopicKVEvents,
		"instance_id": id,
		"transport":   map[string]any{"kind": "Nats", "config": map[string]any{"subject_prefix": strings.TrimSuffix(l.kvSubj, "."+plane.TopicKVEvents)}},
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, plane.DialTimeout)
	defer cancel()
	// Create-if-absent, as Dynamo writes them: a key already there is
	// another instance's.
	key := plane.RegistrationKey(ns, id)
	resp, err := ec.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(plane.InstanceKey(ns, role, id), string(ep), clientv3.WithLease(lease)),
			clientv3.OpPut(plane.MDCKey(ns, role, id), string(mdc), clientv3.WithLease(lease)),
			clientv3.OpPut(plane.EventChannelKey(ns, role, l.events.ID), string(channel), clientv3.WithLease(lease)),
			clientv3.OpPut(key, string(regJSON), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd %s: register: %w", plane.RedactedURLs(l.cfg.Etcd), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: %s is already registered", key)
	}
	return nil
}

// modeled is the modeled time the wall clock has reached.
func (l *workerLoop) modeled() float64 { return l.scale.Modeled(l.pace.Elapsed()) }

// run is the worker's loop. When ctx ends it drains: new requests are
// refused, and it returns once nothing is running, waiting, held or
// reserved (or DrainTimeout passes). A lost lease ends every session the
// worker serves, and it registers again under a new lease (a worker that
// drains does not).
func (l *workerLoop) run(ctx context.Context) error {
	l.cctx, l.ccancel = context.WithCancel(context.Background())
	defer l.ccancel()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	stop := ctx.Done()
	var drainDeadline <-chan time.Time
	heartbeat := time.NewTicker(plane.HeartbeatEvery)
	defer heartbeat.Stop()
	l.ackTimer = time.NewTimer(time.Hour)
	l.ackTimer.Stop()
	defer l.ackTimer.Stop()
	// While the worker registers again (rejoin, off the loop), notes
	// brings what it did and stopRejoin ends it.
	var notes chan rejoinNote
	stopRejoin := func() {}
	defer func() { stopRejoin() }()
	for {
		var lost <-chan struct{}
		if l.reg != nil {
			lost = l.reg.lost
		}
		if l.draining && l.idle() {
			l.sendWaiting()
			l.log.Info("worker drained")
			return nil
		}
		var wake <-chan time.Time
		if at, _, ok := l.v.Next(); ok && l.coupled == 0 {
			d := l.pace.Until(l.scale.Script(at))
			if d <= 0 {
				// Every event due by now, not the first alone: one frame
				// carries what a late wake-up found due.
				_ = l.v.RunUntil(max(at, l.modeled()))
				l.flush()
				continue
			}
			timer.Reset(d)
			wake = timer.C
		}
		var ackDue <-chan time.Time
		if l.ackArmed {
			ackDue = l.ackTimer.C
		}
		select {
		case <-ackDue:
			l.ackArmed = false
			if len(l.items) > 0 {
				l.send()
			} else if acks := l.inbox.acks(); len(acks) > 0 {
				l.control(plane.Frame{Acks: acks})
			}
		case m := <-l.in:
			timer.Stop()
			if l.coupled == 0 {
				l.v.AdvanceTo(l.modeled())
			}
			l.handle(m)
			// Take what else is waiting, so one frame carries the lot.
			for more := true; more; {
				select {
				case m := <-l.in:
					l.handle(m)
				default:
					more = false
				}
			}
			if l.coupled == 0 {
				// On a router's clock the events of the instant wait for
				// its OpRun (see command).
				_ = l.v.RunUntil(l.v.Now())
			}
			l.flush()
		case <-wake:
		case <-heartbeat.C:
			if acks := l.inbox.behind(l.seq, time.Now()); acks != nil {
				l.control(plane.Frame{Acks: acks})
			}
		case <-stop:
			timer.Stop()
			stop = nil
			// A draining worker does not register again.
			stopRejoin()
			notes = nil
			l.draining = true
			l.log.Info("worker draining", "timeout", l.cfg.DrainTimeout)
			t := time.NewTimer(l.cfg.DrainTimeout)
			defer t.Stop()
			drainDeadline = t.C
		case <-drainDeadline:
			m := l.w.Metrics()
			l.log.Warn("drain timed out; leaving with work in flight", "running", m.Running, "waiting", m.Waiting, "held", m.HeldRequests)
			return nil
		case <-lost:
			old := l.leaseLost()
			l.flush()
			// ctx ended for a draining worker: the old lease is revoked,
			// and that is all.
			rctx, cancel := context.WithCancel(ctx)
			stopRejoin = cancel
			if !l.draining {
				notes = make(chan rejoinNote)
			}
			l.wg.Add(1)
			go l.rejoin(rctx, old, notes)
		case n := <-notes:
			l.adopt(n.reg)
			if n.done {
				l.reg = n.reg
				stopRejoin()
				stopRejoin, notes = func() {}, nil
			}
		}
	}
}

// idle: nothing in the engine, and nothing it computed still waiting to be
// delivered (a pass's output is due at the pass's end, after the engine
// already counts its requests done).
func (l *workerLoop) idle() bool {
	m := l.w.Metrics()
	if m.Running != 0 || m.Waiting != 0 || m.HeldRequests != 0 || m.ReservedRequests != 0 {
		return false
	}
	// A pass in flight ends (and is delivered) at the time inputs would
	// take effect.
	now := l.v.Now()
	return l.w.InputAt(now) <= now
}

// handle applies one message at the loop's now.
func (l *workerLoop) handle(m workerMsg) {
	switch {
	case m.arrived != nil:
		l.items = append(l.items, plane.Item{Arrived: m.arrived})
	case m.status != nil:
		l.items = append(l.items, plane.Item{Status: m.status})
	case m.sealed != nil:
		if m.subject == l.cmdSubj {
			// Not a command of a lost registration's.
			l.receiveSealed(m.sealed)
		}
	case m.reconnected:
		l.control(plane.Frame{Acks: l.inbox.active(time.Now())})
	case m.routerGone != 0:
		l.routerGone(m.routerGone)
	case m.routerUp != nil:
		l.routers[m.routerUp.id] = m.routerUp.key
	case m.prefillUp != nil:
		l.prefills[m.prefillUp.id] = m.prefillUp.addr
	case m.prefillGone != 0:
		delete(l.prefills, m.prefillGone)
	case m.refused != nil:
		l.refuseConnect(m.refused)
	}
}

// receive takes a command off NATS: a session's numbered commands are
// applied once and in order (wire.go), control commands at once.
func (l *workerLoop) receive(c plane.Command) {
	switch c.Op {
	case plane.OpAck:
		l.inbox.session(c, l.seq, time.Now())
	case plane.OpResend:
		l.inbox.session(c, l.seq, time.Now())
		l.resend(c.Session, c.From)
	case plane.OpBye:
		l.inbox.forget(c.Session)
		l.withdraw(c.Session)
		l.uncouple(c.Session)
	default:
		for _, r := range l.inbox.accept(c, l.seq, time.Now()) {
			l.command(r)
			if l.coupled != 0 {
				// Each turn is answered with what it alone produced: which
				// commands share a loop turn here is down to the wall clock.
				l.flush()
			}
		}
	}
}

// withdraw ends on this worker the requests of a session its router has
// closed: the router gave the worker up (its reports were lost) or saw it
// leave, and has already ended those requests for their callers. Without
// this they would run, or hold their KV, until their own ends, crowding
// out the requests of the session that replaces it.
func (l *workerLoop) withdraw(session uint64) {
	l.abortRooms(session)
	ids := l.owned.take(session)
	if len(ids) == 0 {
		return
	}
	now := l.v.Now()
	for _, o := range ids {
		if o.dest {
			// A destination still waiting or reserved is dropped; one
			// already activated decodes like any request, and is
			// cancelled: the handoff machine's cleanup does the same.
			l.v.Schedule(now, 0, engine.CancelDestination{ID: o.id})
		}
		l.v.Schedule(now, 0, engine.Cancel{ID: o.id})
	}
	l.log.Info("withdrew the requests of a closed router session", "session", session, "requests", len(ids))
}

// watchRouters follows the namespace's router keys from rev until ctx
// ends and tells the loop of each router whose key is gone.
func (l *workerLoop) watchRouters(ctx context.Context, ec *clientv3.Client, rev int64) {
	defer l.wg.Done()
	plane.WatchPrefix(ctx, ec, plane.RouterPrefix(l.cfg.Namespace), rev, l.log, func(ev *clientv3.Event) {
		var m workerMsg
		switch {
		case ev.Type == mvccpb.PUT:
			r, ok := routerOf(ev.Kv, l.log)
			if !ok {
				return
			}
			m.routerUp = &r
		default:
			id, err := plane.InstanceOfKey(string(ev.Kv.Key))
			if err != nil || id == 0 {
				return
			}
			m.routerGone = id
		}
		select {
		case l.in <- m:
		case <-ctx.Done():
		}
	})
}

// routerGone withdraws the requests of every session of a router whose
// key in etcd is gone: it ended without a goodbye (killed, or cut off
// from etcd for longer than its lease), so nobody waits for them.
func (l *workerLoop) routerGone(router int64) {
	delete(l.routers, router)
	for _, session := range l.inbox.sessionsOf(router) {
		reason := fmt.Sprintf("its router's etcd registration is gone (router %x: lease revoked or expired), so the worker withdrew the router's requests", router)
		l.log.Info("ending a router's session", "session", session, "reason", reason)
		key := plane.Keyed{ID: session, Key: l.inbox.key(session)}
		l.inbox.forget(session)
		// Ahead of the withdrawals' frames, for a router still there.
		l.control(plane.Frame{Ended: &plane.SessionEnded{Session: session, Reason: reason}}, key)
		l.withdraw(session)
		l.uncouple(session)
	}
	l.inbox.routerGone(router)
}

// resend publishes again the frames a router lost, from seq on, and then
// its Head; or, when they are no longer kept, says so.
func (l *workerLoop) resend(session, seq uint64) {
	frames, ok := l.sent.since(seq)
	if !ok {
		l.log.Warn("frames asked for again are no longer kept", "session", session, "from_seq", seq, "oldest_kept", l.sent.oldest())
		l.control(plane.Frame{Lost: &plane.LostFrames{Session: session, From: seq, Oldest: l.sent.oldest()}})
		return
	}
	keys := l.inbox.keys()
	for _, body := range frames {
		if err := l.publishFrame(body, keys...); err != nil {
			l.log.Warn("frame not published again", "err", err)
		}
	}
	l.control(plane.Frame{})
}

// publishFrame seals a frame's body for keys and publishes it.
func (l *workerLoop) publishFrame(body []byte, keys ...plane.Keyed) error {
	l.sealed = plane.AppendSeal(l.sealed[:0], plane.DirFrame, l.outSubj, body, keys...)
	return l.nc.Publish(l.outSubj, l.sealed)
}

// control publishes an unnumbered frame, with the worker's Head, sealed
// for every live session and those of extra (sessions just ended, whose
// router is told why).
func (l *workerLoop) control(f plane.Frame, extra ...plane.Keyed) {
	f.Head = l.seq
	f.Rejected = l.rejected.Total()
	data, err := plane.EncodeFrame(&f)
	if err != nil {
		l.log.Error("control frame not encoded", "err", err)
		return
	}
	if err := l.publishFrame(data, append(l.inbox.keys(), extra...)...); err != nil {
		l.log.Warn("control frame not published", "err", err)
	}
}

func (l *workerLoop) command(c plane.Command) {
	if l.coupled != 0 && c.Session == l.coupled && c.Op != plane.OpRun {
		// Only the events before the command's instant: the engine's own
		// events at that instant wait for the router's OpRun, which the
		// router sends before the command when its queue has them first
		// and after it otherwise, as one event queue would order them.
		switch now := l.v.Now(); {
		case c.At < now:
			l.log.Warn("coupled command in the engine's past; applied at its now", "at_ms", c.At, "now_ms", now)
		case c.At > now:
			_ = l.v.RunUntil(math.Nextafter(c.At, math.Inf(-1)))
			l.v.AdvanceTo(c.At)
		}
		l.turn = max(l.turn, c.Turn)
	}
	switch c.Op {
	case plane.OpOpenRoom:
		if l.openRoom(c.TID, c.ID) {
			l.rooms.opened(c.Session, c.TID)
			l.roomOpened(c.Session, c.TID, c.ID)
		} else {
			delete(l.holds.ended, c.ID)
		}
		return
	case plane.OpConnect:
		l.connect(c)
		return
	case plane.OpHello:
		if c.Coupled {
			l.couple(c)
		}
		return
	case plane.OpRun:
		if l.coupled != 0 && c.Session == l.coupled {
			l.runUntil(c.Until)
			l.turn = max(l.turn, c.Turn)
		}
		return
	}
	in, err := c.Input()
	if err != nil {
		l.log.Warn("bad command", "err", err)
		return
	}
	if l.coupled != 0 && c.Session != l.coupled && (c.Op == plane.OpSubmit || c.Op == plane.OpReserve) {
		c.Tokens = nil
		l.items = append(l.items, plane.Item{Input: &plane.WireInput{At: l.v.Now(), Cmd: c, Err: "worker " + l.cfg.Name + " runs on another router's clock (a coupled session has it to itself)"}})
		return
	}
	if l.draining && (c.Op == plane.OpSubmit || c.Op == plane.OpReserve) {
		// Refused as the engine refuses a bad input: the router's machine
		// ends the request saying why.
		c.Tokens = nil
		l.items = append(l.items, plane.Item{Input: &plane.WireInput{At: l.v.Now(), Cmd: c, Err: "worker " + l.cfg.Name + " is draining (shutting down)"}})
		return
	}
	l.owned.command(c) // what reaches the engine, and from which session
	if l.coupled != 0 && c.Session == l.coupled {
		// At the command's place in the router's queue: the engine's own
		// events at this instant that come first have run (the router
		// sent their run before the command), and those it causes come
		// after, as the router's next run.
		l.v.Apply(0, in)
		return
	}
	l.v.Schedule(l.v.Now(), 0, in)
}

// couple starts the coupled session of hello c: a fresh engine whose
// clock starts at c.At and moves only as the session's commands say. It
// refuses, saying why, when another session's work could mix with it.
func (l *workerLoop) couple(c plane.Command) {
	reason := ""
	switch {
	case l.coupled != 0:
		reason = "it already runs on another router's clock"
	case l.draining:
		reason = "it is draining (shutting down)"
	case len(l.owned) > 0 || !l.idle():
		reason = "it has requests of another router in flight"
	}
	if reason == "" {
		ew, err := l.newEngine()
		if err != nil {
			reason = "its engine could not start: " + err.Error()
		} else {
			l.sendWaiting() // the last engine's
			l.setEngine(ew, c.At)
			if l.server != nil {
				// The session numbers its transfers from 1, as a
				// cluster in process does.
				l.server.Reset()
				l.rooms = sessionRooms{}
				l.holds = newHoldRooms()
			}
			l.coupled, l.turn, l.answered = c.Session, c.Turn, 0
			l.log.Info("running on a router's clock", "session", c.Session, "at_ms", c.At)
			return
		}
	}
	reason = "worker " + l.cfg.Name + " cannot run on a router's clock: " + reason
	l.log.Warn("coupled session refused", "session", c.Session, "reason", reason)
	key := plane.Keyed{ID: c.Session, Key: l.inbox.key(c.Session)}
	l.inbox.forget(c.Session)
	l.control(plane.Frame{Refused: &plane.SessionEnded{Session: c.Session, Reason: reason}}, key)
}

// uncouple ends session's hold on the worker's clock, if it had it: the
// engine it drove is dropped (its requests were withdrawn) and a fresh
// one runs on the wall clock again.
func (l *workerLoop) uncouple(session uint64) {
	if l.coupled == 0 || session != l.coupled {
		return
	}
	l.coupled = 0
	ew, err := l.newEngine()
	if err != nil {
		// The args were good when the worker started; they still are.
		l.log.Error("engine not restarted after a coupled session", "err", err)
		return
	}
	l.setEngine(ew, l.modeled())
	l.log.Info("back on the wall clock", "session", session)
}

// runUntil runs a coupled engine's events up to modeled ms t (inclusive;
// at t, those queued when the run came: what they queue at t is the
// router's next run) and moves its clock there. A t before the clock (a
// router out of step) moves nothing.
func (l *workerLoop) runUntil(t float64) {
	if t < l.v.Now() {
		l.log.Warn("coupled command in the engine's past; applied at its now", "at_ms", t, "now_ms", l.v.Now())
		return
	}
	_ = l.v.RunDue(t)
	l.v.AdvanceTo(t)
}

// openRoom opens a transfer room and answers with the handoff params the
// decode needs, in the engine's own shape; it reports whether the room is
// open.
func (l *workerLoop) openRoom(tid, reqID uint64) bool {
	if l.server == nil {
		l.items = append(l.items, plane.Item{Room: &plane.WireRoom{TID: tid, Err: "worker " + l.cfg.Name + " has no transfer server (not a prefill worker)"}})
		return false
	}
	// The room is the transfer id; the token binds the router's request
	// id, which the decode presents with it.
	params, err := transfer.Open(l.server, l.cfg.Engine, tid, reqID)
	if err != nil {
		l.items = append(l.items, plane.Item{Room: &plane.WireRoom{TID: tid, Err: err.Error()}})
		return false
	}
	raw, err := json.Marshal(params)
	if err != nil {
		_ = l.server.Abort(tid)
		l.items = append(l.items, plane.Item{Room: &plane.WireRoom{TID: tid, Err: err.Error()}})
		return false
	}
	l.items = append(l.items, plane.Item{Room: &plane.WireRoom{TID: tid, Params: raw}})
	return true
}

// connect is the decode side of a transfer: dial the source's transfer
// server named in the params, if a registered prefill advertises it
// (prefills.go), and report its answer.
func (l *workerLoop) connect(c plane.Command) {
	target, err := transfer.TargetOf(l.cfg.Engine, c.Params)
	if err != nil {
		l.items = append(l.items, plane.Item{Status: &plane.WireStatus{TID: c.TID, Status: plane.StatusName(handoff.Error), Err: err.Error()}})
		return
	}
	tid, reqID, session := c.TID, c.ID, c.Session
	wait := l.awaitBound()
	known := l.advertised(target.Addr)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if !known {
			// Not seen on the watch (yet): etcd says for sure.
			ok, err := l.advertisedNow(l.cctx, target.Addr)
			if err != nil || !ok {
				ws := &plane.WireStatus{TID: tid, Status: plane.StatusName(handoff.Error)}
				m := workerMsg{status: ws}
				if err != nil {
					ws.Err = fmt.Sprintf("transfer %d: cannot check that a registered prefill advertises %s: %v", tid, target.Addr, err)
				} else {
					ws.Err = fmt.Sprintf("transfer %d: no registered prefill worker advertises %s; not dialed", tid, target.Addr)
					m = workerMsg{refused: &unadvertised{session: session, addr: target.Addr, status: ws}}
				}
				select {
				case l.in <- m:
				case <-l.cctx.Done():
				}
				return
			}
		}
		// A source that went away without a word (the network dropped
		// under a kept connection) must not hold the request for ever:
		// past every timeout that could still end the hold, it is an
		// error naming the wait.
		ctx, cancel := context.WithTimeout(l.cctx, wait)
		defer cancel()
		st := transfer.Await(ctx, &l.client, target, reqID)
		if st.Status == handoff.Error && ctx.Err() != nil && l.cctx.Err() == nil {
			st.Err = fmt.Sprintf("transfer %d: no answer from the source's transfer server %s within %s (past its session timeout): %s", tid, target.Addr, wait, st.Err)
		}
		ws := &plane.WireStatus{TID: tid, Status: plane.StatusName(st.Status), Err: st.Err}
		select {
		case l.in <- workerMsg{status: ws}:
		case <-l.cctx.Done():
		}
	}()
}

// awaitBound is how long (wall time) a decode waits for a source's
// answer: the longest a hold can last on its modeled timeouts (the
// session timeout, or the abort timeout if longer), at this worker's
// speedup_ratio, plus a margin for the network.
func (l *workerLoop) awaitBound() time.Duration {
	ms := float64(l.args.HandoffSessionTimeoutMs)
	if a, ok := l.args.AbortTimeoutMs(); ok {
		ms = max(ms, float64(a))
	}
	return l.scale.Script(ms) + 10*time.Second
}

func (l *workerLoop) onOutput(_ int, out *engine.Output) {
	if l.server != nil {
		l.holdsEnded(out)
	}
	l.owned.output(out)
	l.items = append(l.items, plane.Item{Output: plane.OutputOf(out)})
	if l.cfg.NoEventPlane {
		return
	}
	now := time.Now()
	worker := uint64(l.id)
	for _, ev := range out.KVEvents {
		if ev.Medium != kv.MediumGPU {
			// Dynamo's router indexes a lower tier's block under its
			// parent and tokens hash, which the engine's tier events do
			// not carry: they stay off its subject, whose events are all
			// storage_tier "device". mocker's router gets them in frames.
			continue
		}
		l.publish(l.kvSubj, l.events.Envelope(plane.TopicKVEvents, plane.RouterEvent(worker, ev), now))
	}
	if used := out.Metrics.RouterActiveBlocks; used != l.events.LastLoad {
		l.events.LastLoad = used
		l.publish(l.loadSubj, l.events.Envelope(plane.TopicMetrics, plane.ActiveLoad(worker, out.Metrics), now))
	}
}

func (l *workerLoop) publish(subj string, data []byte) {
	if err := l.nc.Publish(subj, data); err != nil {
		l.log.Warn("event not published", "subject", subj, "err", err)
	}
}

func (l *workerLoop) onInput(r engine.InputResult) {
	c := plane.CommandOf(r.Input)
	c.Tokens = nil // the router knows them; the reply names the request
	wi := &plane.WireInput{At: r.At, Cmd: c, OK: r.Reply.OK, DelayMs: r.Reply.DelayMs}
	if r.Reply.Err != nil {
		wi.Err = r.Reply.Err.Error()
		l.owned.end(c.ID) // a refused Submit or Reserve
	}
	l.items = append(l.items, plane.Item{Input: wi})
}

// flush publishes what the loop produced as one numbered frame, kept for
// resending, with the acks due. Acks with nothing to carry them wait up
// to plane.AckDelay for a frame that does, and then go alone in a control
// frame. So, on the worker's own clock, do passes that report only its
// load (most of a decode's): a frame per pass would be most of the
// plane's traffic, and the router learns nothing from them but a load
// a few wall milliseconds sooner. A coupled worker answers every turn.
func (l *workerLoop) flush() {
	answer := l.coupled != 0 && l.turn > l.answered
	if !answer && (len(l.items) == 0 || (l.coupled == 0 && loadOnly(l.items))) {
		if !l.ackArmed && (len(l.items) > 0 || l.inbox.ackDue()) {
			l.ackTimer.Reset(plane.AckDelay)
			l.ackArmed = true
		}
		return
	}
	l.send()
}

// loadOnly reports whether items are all outputs that report only a load.
func loadOnly(items []plane.Item) bool {
	for _, it := range items {
		if it.Output == nil || !it.Output.LoadOnly() {
			return false
		}
	}
	return true
}

// sendWaiting sends the outputs that wait for company (flush) now.
func (l *workerLoop) sendWaiting() {
	if len(l.items) > 0 {
		l.send()
	}
}

// send publishes the items and the acks due as one numbered frame.
func (l *workerLoop) send() {
	acks := l.inbox.acks()
	if l.ackArmed {
		l.ackTimer.Stop()
		l.ackArmed = false
	}
	f := plane.Frame{Seq: l.seq, Items: l.items, Head: l.seq + 1, Acks: acks, Rejected: l.rejected.Total()}
	if l.coupled != 0 {
		f.Turn = l.turn
		l.answered = l.turn
		if at, ok := l.v.NextLive(); ok {
			f.Next = &at
		}
	}
	data, err := plane.EncodeFrame(&f)
	l.items = l.items[:0]
	if err != nil {
		l.log.Error("frame not encoded", "err", err)
		return
	}
	// Kept unsealed: a resend is sealed for the sessions live then.
	l.sent.add(l.seq, data)
	l.seq++
	if err := l.publishFrame(data, l.inbox.keys()...); err != nil {
		l.log.Warn("frame not published", "seq", l.seq-1, "err", err)
	}
}
