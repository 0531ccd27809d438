package distributed

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// crash ends the router as a killed process would: no goodbyes, its NATS
// and etcd connections just drop, and its lease runs out on its own.
func (t *transport) crash() {
	t.cancel()
	t.nc.Close()
	_ = t.ec.Close()
}

// oneWorker starts etcd, NATS and one aggregated worker, w0, in namespace
// ns, and returns them and the config of a cluster attached to them. It
// runs at speedup 1, so that longRequests run for minutes.
func oneWorker(t *testing.T, ns string) (*localServices, cluster.Config) {
	t.Helper()
	ls := services(t)
	startWorkers(t, ls, ns,
		worker.Config{Name: "w0", Role: engine.WorkerAggregated, Args: []byte(`{"speedup_ratio": 1}`), DrainTimeout: 2 * time.Second})
	return ls, cluster.Config{Name: ns, Workers: 1, Args: map[string]any{"speedup_ratio": 1},
		Transport: ls.transport(ns)}
}

// longRequests starts n requests on c long enough to run for minutes
// (only a withdrawal or a cancellation ends them in a test's time) and
// returns where their results come.
func longRequests(ctx context.Context, c *cluster.Cluster, n int) <-chan cluster.Result {
	results := make(chan cluster.Result, n)
	for range n {
		go func() { results <- c.Generate(ctx, cluster.Request{PromptTokens: 64, MaxTokens: 40000}) }()
	}
	return results
}

// TestRouterGone_WorkersWithdrawItsRequests kills one of two routers
// sharing workers: once its etcd key expires the workers withdraw that
// router's requests, and only those, aggregated and disaggregated (where
// the requests decode on a handoff's destination).
func TestRouterGone_WorkersWithdrawItsRequests(t *testing.T) {
	t.Parallel()
	t.Run("aggregated", func(t *testing.T) {
		t.Parallel()
		ls, cfg := oneWorker(t, "gone-router")
		routerGone(t, ls, cfg)
	})
	t.Run("disaggregated", func(t *testing.T) {
		t.Parallel()
		ls := services(t)
		const ns = "gone-router-pd"
		startWorkers(t, ls, ns,
			worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 1}`), DrainTimeout: 2 * time.Second},
			worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 1}`), DrainTimeout: 2 * time.Second})
		routerGone(t, ls, cluster.Config{Name: ns, Disagg: true, Args: map[string]any{"speedup_ratio": 1},
			Prefill: cluster.PoolConfig{Workers: 1}, Decode: cluster.PoolConfig{Workers: 1},
			Transport: ls.transport(ns)})
	})
}

func routerGone(t *testing.T, ls *localServices, cfg cluster.Config) {
	doomed, err := cluster.New(cfg)
	require.NoError(t, err)
	survivor, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, survivor.Close()) }()

	// The routers' keys name them.
	ns := cfg.Transport.Namespace
	ec := etcdClient(t, ls)
	resp, err := ec.Get(context.Background(), plane.RouterPrefix(ns), clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 2, "one key per router")
	var rec plane.RouterRegistration
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &rec))
	assert.NotZero(t, rec.RouterID)
	assert.Equal(t, plane.RouterKey(ns, rec.RouterID), string(resp.Kvs[0].Key))

	doomedDone := longRequests(context.Background(), doomed, 2)
	ctx, cancel := context.WithCancel(context.Background())
	survivorDone := longRequests(ctx, survivor, 1)
	// busy asserts how many requests the workers have, and with none that
	// they hold no KV; a failure names what the survivor saw last.
	busy := func(want int) func(*assert.CollectT) {
		return func(c *assert.CollectT) {
			ws := survivor.Stats().Workers
			running, blocks := 0, 0
			for _, w := range ws {
				running += w.Running + w.Waiting + w.HeldRequests
				blocks += w.ActiveBlocks + w.HeldBlocks + w.ReservedBlocks
			}
			assert.Equal(c, want, running, "requests on the workers: %+v", ws)
			if want == 0 {
				assert.Zero(c, blocks, "KV blocks in use: %+v", ws)
			}
		}
	}
	require.EventuallyWithT(t, busy(3), time.Minute, 5*time.Millisecond)

	doomed.Transport().(*transport).crash()
	// The doomed router's lease expires LeaseTTLSeconds after its last
	// keep-alive; then the workers withdraw its two requests.
	require.EventuallyWithT(t, busy(1), (plane.LeaseTTLSeconds+5)*time.Second, 20*time.Millisecond, "the dead router's requests still run")
	select {
	case r := <-survivorDone:
		t.Fatalf("the surviving router's request ended: %+v", r)
	default:
	}

	cancel()
	r := <-survivorDone
	assert.Equal(t, cluster.OutcomeError, r.Outcome, "cancelled by its caller")
	require.EventuallyWithT(t, busy(0), 20*time.Second, 10*time.Millisecond, "the workers still run the survivor's request")
	require.NoError(t, doomed.Close())
	for range 2 {
		r := <-doomedDone
		assert.Equal(t, cluster.OutcomeError, r.Outcome, "the dead router's callers hear it ended")
	}
}

// TestRouterLease_LostEndsItsRequestsAndRegistersAgain ends a live
// router's lease behind its back (as etcd does when the router cannot
// reach it for longer than the TTL): its workers withdraw its requests,
// so the router ends them saying why, registers again under a new lease
// and serves new requests.
func TestRouterLease_LostEndsItsRequestsAndRegistersAgain(t *testing.T) {
	t.Parallel()
	ls, cfg := oneWorker(t, "lost-lease")
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const n = 2
	results := longRequests(context.Background(), c, n)
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == n }, time.Minute, 5*time.Millisecond)

	tr := c.Transport().(*transport)
	tr.mu.Lock()
	old := tr.router
	// Widen the gap between the worker's leaving and its joining again,
	// which a loaded host opens on its own: a request that finds the
	// router registered again must find its worker joined again too.
	tr.rejoining = func() { time.Sleep(300 * time.Millisecond) }
	tr.mu.Unlock()
	ec := etcdClient(t, ls)
	_, err = ec.Revoke(context.Background(), old)
	require.NoError(t, err)

	// Whichever hears of it first says why: the worker (the key's end)
	// or the router (its keep-alive's).
	for range n {
		r := <-results
		assert.Equal(t, cluster.OutcomeError, r.Outcome)
		assert.Regexp(t, `etcd registration is gone \(router [0-9a-f]+: lease revoked or expired\), so the worker withdrew|router's etcd lease [0-9a-f]+ ended`, r.Error)
	}
	var now clientv3.LeaseID
	require.Eventually(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		now = tr.router
		return now != old
	}, 3*plane.LeaseTTLSeconds*time.Second, 10*time.Millisecond, "registered again under a new lease")
	r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 4})
	assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	resp, err := ec.Get(context.Background(), plane.RouterKey("lost-lease", int64(now)))
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, 1, "its new key is there")
	// The worker withdrew the old session's requests: its pool is free.
	require.Eventually(t, func() bool {
		w := c.Stats().Workers[0]
		return w.Running == 0 && w.Waiting == 0 && w.ActiveBlocks == 0
	}, 20*time.Second, 10*time.Millisecond, "the old session's requests still run on w0: %+v", c.Stats().Workers)
}
