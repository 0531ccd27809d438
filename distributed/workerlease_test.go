package distributed

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// TestWorkerLease_LostRegistersAgainUnderANewLease ends a live worker's
// lease behind its back (as etcd does when the worker cannot reach it for
// longer than the TTL): the requests of the old session end with an
// outcome, and the worker, instead of exiting, registers again under a
// new lease, which the router joins and sends new requests to.
func TestWorkerLease_LostRegistersAgainUnderANewLease(t *testing.T) {
	t.Parallel()
	const ns = "worker-lease"
	ls, cfg := oneWorker(t, ns)
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const n = 2
	results := longRequests(context.Background(), c, n)
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == n }, time.Minute, 5*time.Millisecond)

	ec := etcdClient(t, ls)
	old := registrations(t, ec, ns)["w0"].InstanceID
	require.NotZero(t, old)
	_, err = ec.Revoke(context.Background(), clientv3.LeaseID(old))
	require.NoError(t, err)

	for range n {
		select {
		case r := <-results:
			assert.Equal(t, cluster.OutcomeError, r.Outcome)
			assert.Regexp(t, `worker w0 lost|etcd lease [0-9a-f]+ ended`, r.Error)
		case <-time.After(time.Minute):
			t.Fatal("a request of the old session did not end")
		}
	}

	var now plane.Registration
	require.Eventually(t, func() bool {
		now = registrations(t, ec, ns)["w0"]
		return now.InstanceID != 0 && now.InstanceID != old
	}, 3*plane.LeaseTTLSeconds*time.Second, 10*time.Millisecond, "w0 registered again under a new lease")
	resp, err := ec.Get(context.Background(), plane.RegistrationKey(ns, now.InstanceID))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, now.InstanceID, resp.Kvs[0].Lease, "the new registration lives under the lease its instance id names")
	assert.Equal(t, plane.CmdSubject(ns, now.InstanceID), now.CmdSubject)

	// The router joins the worker again and serves new requests on it.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := c.Generate(ctx, cluster.Request{PromptTokens: 64, MaxTokens: 4})
		return r.Outcome == cluster.OutcomeCompleted && r.PrefillWorker == "w0"
	}, 30*time.Second, 50*time.Millisecond, "a new request completes on w0")
	// The old session's requests were withdrawn: nothing is left running.
	require.Eventually(t, func() bool {
		for _, w := range c.Stats().Workers {
			if w.Running != 0 || w.Waiting != 0 || w.ActiveBlocks != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the old session's requests still run: %+v", c.Stats().Workers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored, "request conservation")
}

// etcdGate is a TCP relay between a worker and etcd that a test cuts
// (every connection closed, none taken: etcd out of reach) and mends.
type etcdGate struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newEtcdGate(t *testing.T, etcdURL string) *etcdGate {
	t.Helper()
	u, err := url.Parse(etcdURL)
	require.NoError(t, err)
	g := &etcdGate{t: t, target: u.Host, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g.addr = ln.Addr().String()
	g.serve(ln)
	t.Cleanup(func() { g.cut(); g.wg.Wait() })
	return g
}

func (g *etcdGate) url() string { return "http://" + g.addr }

func (g *etcdGate) serve(ln net.Listener) {
	g.ln = ln
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", g.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			g.mu.Lock()
			g.conns[c], g.conns[up] = struct{}{}, struct{}{}
			g.mu.Unlock()
			for _, p := range [][2]net.Conn{{c, up}, {up, c}} {
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					_, _ = io.Copy(p[0], p[1])
					_ = p[0].Close()
					_ = p[1].Close()
				}()
			}
		}
	}()
}

// cut closes the relay's listener and every connection through it.
func (g *etcdGate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
		delete(g.conns, c)
	}
}

// mend listens again on the relay's address.
func (g *etcdGate) mend() {
	var ln net.Listener
	require.Eventually(g.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", g.addr)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "relay listens again on %s", g.addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serve(ln)
}

// logCounter counts a logger's records by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

// count is how many records start with prefix.
func (c *logCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.n {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// TestWorkerLease_EtcdOutOfReachHoldsUpNothingElse cuts a worker off
// from etcd (and only it: its router still reaches etcd) and ends its
// lease. While its attempts to register again fail, its loop still
// answers: each time its NATS connection comes back it tells its
// routers its Head, in a frame, and two such frames, the second asked
// for only after the first came, come before the first attempt has
// failed (an attempt waits for etcd's timeout; a loop that waited with
// it would answer after). Once etcd is in reach again the worker
// registers again and its router serves on it.
func TestWorkerLease_EtcdOutOfReachHoldsUpNothingElse(t *testing.T) {
	t.Parallel()
	const ns = "worker-lease-cut"
	ls := services(t)
	gate := newEtcdGate(t, ls.etcdURL)
	logs := &logCounter{n: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Config{Name: "w0", Role: engine.WorkerAggregated, Args: []byte(`{"speedup_ratio": 1}`),
			DrainTimeout: 2 * time.Second, Namespace: ns, Etcd: []string{gate.url()}, NATS: ls.natsURL,
			NATSAuth: ls.natsAuth, EtcdAuth: ls.etcdAuth, Logger: slog.New(logs)})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	defer stop()
	ec := etcdClient(t, ls)
	var old plane.Registration
	require.Eventually(t, func() bool { old = registrations(t, ec, ns)["w0"]; return old.InstanceID != 0 },
		30*time.Second, 10*time.Millisecond, "w0 registered")
	c, err := cluster.New(cluster.Config{Name: ns, Workers: 1, Args: map[string]any{"speedup_ratio": 1}, Transport: ls.transport(ns)})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	results := longRequests(context.Background(), c, 1)
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == 1 }, time.Minute, 5*time.Millisecond)

	nc, err := plane.DialNATS(ls.natsURL, "observer", ls.natsAuth)
	require.NoError(t, err)
	defer nc.Close()
	frames := make(chan struct{}, 64)
	sub, err := nc.Subscribe(old.OutSubject, func(*nats.Msg) {
		select {
		case frames <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())

	gate.cut()
	_, err = ec.Revoke(context.Background(), clientv3.LeaseID(old.InstanceID))
	require.NoError(t, err)
	select {
	case r := <-results:
		assert.Equal(t, cluster.OutcomeError, r.Outcome, "the old session's request ends")
	case <-time.After(time.Minute):
		t.Fatal("the request of the old session did not end")
	}
	require.Eventually(t, func() bool { return logs.count("etcd lease lost") == 1 }, time.Minute, 10*time.Millisecond,
		"w0 saw its lease lost")

	kick := func() {
		cz, err := ls.nats.Connz(&natsserver.ConnzOptions{})
		require.NoError(t, err)
		for _, ci := range cz.Conns {
			if ci.Name == "w0" {
				require.NoError(t, ls.nats.DisconnectClientByID(ci.Cid))
				return
			}
		}
		t.Fatal("w0's NATS connection not found")
	}
	for i := range 2 {
		for len(frames) > 0 {
			<-frames
		}
		kick()
		select {
		case <-frames:
		case <-time.After(time.Minute):
			t.Fatalf("no frame after NATS came back (%d)", i)
		}
	}
	assert.Zero(t, logs.count("not registered again yet"),
		"the loop answered only once an attempt to register again had failed: it waited for etcd")

	// Attempts fail while etcd is out of reach; once it is back the
	// worker registers again, and its router serves on it.
	require.Eventually(t, func() bool { return logs.count("not registered again yet") >= 1 }, time.Minute, 10*time.Millisecond)
	gate.mend()
	require.Eventually(t, func() bool {
		now := registrations(t, ec, ns)["w0"]
		return now.InstanceID != 0 && now.InstanceID != old.InstanceID
	}, time.Minute, 10*time.Millisecond, "w0 registered again under a new lease")
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := c.Generate(ctx, cluster.Request{PromptTokens: 64, MaxTokens: 4})
		return r.Outcome == cluster.OutcomeCompleted && r.PrefillWorker == "w0"
	}, 30*time.Second, 50*time.Millisecond, "a new request completes on w0")
	stop()
	assert.Empty(t, registrations(t, ec, ns), "a stopped worker leaves")
}
