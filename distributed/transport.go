package distributed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/engine"
)

func init() { cluster.RegisterTransport(Start) }

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
	t, err := attach(host, tc.Etcd, tc.NATS, tc.NamespaceOrDefault(), log)
	if err != nil {
		return nil, err
	}
	t.name = "etcd+nats"
	if err := t.await(attachWait, func(n map[engine.WorkerType]int) bool {
		for _, p := range host.Pools() {
			if n[p.Role] == 0 {
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
	host   *cluster.RemoteHost
	log    *slog.Logger
	name   string
	ns     string
	etcd   string // the endpoints, for messages
	ec     *clientv3.Client
	nc     *nats.Conn
	sub    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	epoch  time.Time
	speed  float64

	mu      sync.Mutex
	workers map[int64]*remote
	refused map[string]string // worker name → why it was refused
	local   *localServices
	closed  bool
}

// remote is one worker as the router reaches it.
type remote struct {
	t     *transport
	reg   Registration
	shift float64 // ms to add to the worker's modeled times
	next  uint64  // the frame seq expected next
	seen  bool    // a frame came already
}

func attach(host *cluster.RemoteHost, etcd []string, natsURL, ns string, log *slog.Logger) (*transport, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &transport{host: host, log: log, ns: ns, etcd: strings.Join(etcd, ","), ctx: ctx, cancel: cancel,
		workers: map[int64]*remote{}, refused: map[string]string{}}
	t.epoch, t.speed = host.Epoch()
	var err error
	if t.ec, err = dialEtcd(ctx, etcd); err != nil {
		cancel()
		return nil, err
	}
	if t.nc, err = dialNATS(natsURL, "mocker-router"); err != nil {
		cancel()
		_ = t.ec.Close()
		return nil, err
	}
	// Subscribe before listing, so no frame of a worker found by the list
	// is missed.
	t.sub, err = t.nc.Subscribe(outWildcard(ns), t.onFrame)
	if err == nil {
		err = t.sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = t.nc.Flush()
	}
	if err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("nats %s: subscribe: %w", natsURL, err)
	}
	lctx, lcancel := context.WithTimeout(ctx, dialTimeout)
	resp, err := t.ec.Get(lctx, registrationPrefix(ns), clientv3.WithPrefix())
	lcancel()
	if err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("etcd %s: list %s: %w", t.etcd, registrationPrefix(ns), err)
	}
	for _, kv := range resp.Kvs {
		t.put(kv)
	}
	t.wg.Add(1)
	go t.watch(resp.Header.Revision + 1)
	return t, nil
}

// Name is the transport's name for summaries.
func (t *transport) Name() string { return t.name }

// await waits until ok holds for the live workers, up to d; failed, when
// set, reports a reason to stop waiting early (a child worker exited).
func (t *transport) await(d time.Duration, ok func(map[engine.WorkerType]int) bool, failed func() error) error {
	deadline := time.Now().Add(d)
	for {
		n := t.host.Workers()
		if ok(n) {
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

// watch follows the registrations from rev, resuming after the last
// revision it saw when the watch breaks.
func (t *transport) watch(rev int64) {
	defer t.wg.Done()
	prefix := registrationPrefix(t.ns)
	for t.ctx.Err() == nil {
		wch := t.ec.Watch(clientv3.WithRequireLeader(t.ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				t.log.Warn("etcd watch broke; resuming", "revision", rev, "err", err)
				if wr.CompactRevision > rev {
					rev = wr.CompactRevision
				}
				break
			}
			for _, ev := range wr.Events {
				switch ev.Type {
				case mvccpb.PUT:
					t.put(ev.Kv)
				case mvccpb.DELETE:
					t.del(string(ev.Kv.Key))
				}
				rev = ev.Kv.ModRevision + 1
			}
		}
		select {
		case <-t.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// put joins a newly registered worker.
func (t *transport) put(kv *mvccpb.KeyValue) {
	var reg Registration
	if err := json.Unmarshal(kv.Value, &reg); err != nil {
		t.log.Warn("unreadable registration", "key", string(kv.Key), "err", err)
		return
	}
	var args engine.Args
	if err := json.Unmarshal(reg.Args, &args); err != nil {
		t.log.Warn("unreadable registration args", "worker", reg.Name, "err", err)
		return
	}
	t.mu.Lock()
	if _, ok := t.workers[reg.InstanceID]; ok || t.closed {
		t.mu.Unlock()
		return
	}
	// The worker's modeled clock started at its epoch; both run at the
	// same speedup (Join refuses another), so its times map onto the
	// cluster's by a constant shift.
	shift := float64(time.Unix(0, reg.EpochUnixNano).Sub(t.epoch)) / float64(time.Millisecond) * t.speed
	w := &remote{t: t, reg: reg, shift: shift}
	t.workers[reg.InstanceID] = w
	t.mu.Unlock()
	err := t.host.Join(cluster.RemoteInfo{Name: reg.Name, Role: reg.Role, Args: args, TransferAddr: reg.TransferAddr}, w)
	if err != nil {
		t.log.Warn("worker refused", "worker", reg.Name, "err", err)
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
	id, err := instanceOfKey(key)
	if err != nil {
		return
	}
	t.mu.Lock()
	w := t.workers[id]
	t.mu.Unlock()
	if w == nil {
		return
	}
	reason := fmt.Sprintf("its etcd registration is gone (instance %x: lease revoked or expired)", id)
	// Leave through the worker's own frame stream, behind its last
	// frames; directly if the marker does not come back (NATS is down).
	data, _ := json.Marshal(frame{Leave: reason})
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
	closed := t.closed
	t.mu.Unlock()
	if w != nil && !closed {
		t.host.Leave(w.reg.Name, reason)
	}
}

// onFrame hands one worker frame to the cluster's loop. NATS runs it on
// the subscription's one goroutine, so frames arrive in order.
func (t *transport) onFrame(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 4 {
		return
	}
	id, err := instanceOfKey(parts[2])
	if err != nil {
		return
	}
	t.mu.Lock()
	w := t.workers[id]
	t.mu.Unlock()
	if w == nil {
		return
	}
	var f frame
	if err := json.Unmarshal(m.Data, &f); err != nil {
		t.log.Warn("unreadable frame", "worker", w.reg.Name, "err", err)
		return
	}
	if f.Leave != "" {
		t.leave(id, f.Leave)
		return
	}
	expected := w.next
	gap := w.seen && f.Seq != expected
	w.seen, w.next = true, f.Seq+1
	items, err := remoteItems(&f, w.shift)
	if err != nil {
		t.log.Warn("bad frame", "worker", w.reg.Name, "err", err)
		return
	}
	if gap {
		// NATS core delivers at most once: a lost frame loses KV events
		// (the indexer resyncs: it drops the worker's tree and relearns
		// it) and request steps (their requests end at Close).
		t.log.Warn("frames lost", "worker", w.reg.Name, "expected_seq", expected, "got_seq", f.Seq)
		items = append([]cluster.RemoteItem{{Resync: true}}, items...)
	}
	t.host.Deliver(w.reg.Name, items)
}

func (w *remote) send(c command) {
	data, err := json.Marshal(c)
	if err != nil {
		w.t.log.Error("command not encoded", "worker", w.reg.Name, "err", err)
		return
	}
	if err := w.t.nc.Publish(w.reg.CmdSubject, data); err != nil {
		w.t.log.Warn("command not sent", "worker", w.reg.Name, "op", c.Op, "err", err)
	}
}

// Apply sends an engine input.
func (w *remote) Apply(in engine.Input) { w.send(commandOf(in)) }

// OpenRoom asks the prefill for a transfer room.
func (w *remote) OpenRoom(tid, reqID uint64) { w.send(command{Op: opOpenRoom, TID: tid, ID: reqID}) }

// CloseRoom tells the prefill how the hold ended.
func (w *remote) CloseRoom(tid uint64, transferred bool) {
	w.send(command{Op: opCloseRoom, TID: tid, Transferred: transferred})
}

// Connect makes the decode dial the source's transfer room.
func (w *remote) Connect(tid, reqID uint64, params []byte) {
	w.send(command{Op: opConnect, TID: tid, ID: reqID, Params: params})
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
