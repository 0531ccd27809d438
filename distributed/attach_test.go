package distributed

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// services starts an embedded etcd and NATS for one test, open to any
// client; securedServices's require the run's user and password.
func services(t *testing.T) *localServices { t.Helper(); return startedServices(t, false) }

func securedServices(t *testing.T) *localServices { t.Helper(); return startedServices(t, true) }

func startedServices(t *testing.T, secure bool) *localServices {
	t.Helper()
	ls, err := startServices(secure)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ls.close() })
	return ls
}

// workers runs worker.Run for each config in this process until the test
// ends, and waits until all are registered.
type workerSet struct {
	cancel map[string]context.CancelFunc
	errs   map[string]chan error
}

func startWorkers(t *testing.T, ls *localServices, ns string, cfgs ...worker.Config) *workerSet {
	t.Helper()
	ws := &workerSet{cancel: map[string]context.CancelFunc{}, errs: map[string]chan error{}}
	var wg sync.WaitGroup
	for _, cfg := range cfgs {
		cfg.Etcd, cfg.NATS, cfg.Namespace = []string{ls.etcdURL}, ls.natsURL, ns
		cfg.NATSAuth, cfg.EtcdAuth = ls.natsAuth, ls.etcdAuth
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		ws.cancel[cfg.Name], ws.errs[cfg.Name] = cancel, errc
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- worker.Run(ctx, cfg)
		}()
	}
	t.Cleanup(func() {
		for _, c := range ws.cancel {
			c()
		}
		wg.Wait()
	})
	ec := etcdClient(t, ls)
	require.Eventually(t, func() bool {
		resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == int64(len(cfgs))
	}, 30*time.Second, 10*time.Millisecond, "workers registered")
	return ws
}

func etcdClient(t *testing.T, ls *localServices) *clientv3.Client {
	t.Helper()
	ec, err := plane.DialEtcd(context.Background(), []string{ls.etcdURL}, ls.etcdAuth)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ec.Close() })
	return ec
}

func attachConfig(ls *localServices, ns string) cluster.Config {
	return cluster.Config{
		Name: "attach", Disagg: true,
		Args:      map[string]any{"speedup_ratio": 10, "kv_transfer_abort_timeout_ms": 2000},
		Transport: ls.transport(ns),
	}
}

func TestAttach_UnreachableEtcdFailsNamingTheURL(t *testing.T) {
	t.Parallel()
	_, err := cluster.New(cluster.Config{Transport: &cluster.TransportConfig{
		Etcd: []string{"http://127.0.0.1:1"}, NATS: "nats://127.0.0.1:1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etcd http://127.0.0.1:1 unreachable")
}

func TestAttach_UnreachableNATSFailsNamingTheURL(t *testing.T) {
	t.Parallel()
	ls := services(t)
	_, err := cluster.New(cluster.Config{Transport: &cluster.TransportConfig{
		Etcd: []string{ls.etcdURL}, NATS: "nats://127.0.0.1:1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats nats://127.0.0.1:1 unreachable")
}

// TestAttach_RunsOnRegisteredWorkers attaches a script's cluster to workers
// started on their own (here in this process) and runs requests through
// them; the registration carries Dynamo's keys too.
func TestAttach_RunsOnRegisteredWorkers(t *testing.T) {
	t.Parallel()
	ls := services(t)
	startWorkers(t, ls, "att",
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	ec := etcdClient(t, ls)
	resp, err := ec.Get(context.Background(), "v1/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.SplitN(string(kv.Key), "/", 5)[:4]...)
	}
	assert.Subset(t, keys, []string{"instances", "mdc", "mocker", "prefill", "backend", "att"})

	// Dynamo's event plane, as `nats sub 'namespace.att.>'` shows it.
	nc, err := nats.Connect(ls.natsURL)
	require.NoError(t, err)
	defer nc.Close()
	var mu sync.Mutex
	topics := map[string]int{}
	sub, err := nc.Subscribe("namespace.att.>", func(m *nats.Msg) {
		// The envelope's topic, a msgpack string (its shape is
		// tested with the encoder).
		for _, topic := range []string{"kv-events", "kv_metrics"} {
			if bytes.Contains(m.Data, append([]byte{0xa0 | byte(len(topic))}, topic...)) {
				mu.Lock()
				topics[m.Subject+" "+topic]++
				mu.Unlock()
			}
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())

	c, err := cluster.New(attachConfig(ls, "att"))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	assert.Equal(t, "etcd+nats", c.TransportName())
	for range 4 {
		r := c.Generate(context.Background(), cluster.Request{PromptTokens: 256, MaxTokens: 8})
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, "p0", r.PrefillWorker)
		assert.Equal(t, "d0", r.DecodeWorker)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.Equal(t, 8, r.OutputTokens)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Drain(ctx)
	require.NoError(t, err)
	require.NoError(t, c.CheckInvariants())
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		// A prefill stores the prompts' blocks; the decode's load moves.
		return topics["namespace.att.component.prefill.kv-events kv-events"] > 0 &&
			topics["namespace.att.component.backend.endpoint.generate.kv_metrics kv_metrics"] > 0
	}, 10*time.Second, 10*time.Millisecond, "event plane messages")
}

// TestAttach_BlockSizeMismatchIsRefusedByName: a worker whose block_size
// differs from the cluster's cannot share its router's indexer.
func TestAttach_BlockSizeMismatchIsRefusedByName(t *testing.T) {
	t.Parallel()
	ls := services(t)
	startWorkers(t, ls, "bs",
		worker.Config{Name: "odd-prefill", Role: engine.WorkerPrefill, Args: []byte(`{"block_size": 32, "speedup_ratio": 10}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	_, err := cluster.New(attachConfig(ls, "bs"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "worker odd-prefill refused: block_size 32 differs from the cluster's 16")
}

// TestAttach_WorkerLossFailsItsRequestsNamingIt revokes a decode worker's
// lease while it decodes: its registration goes, the router drops it, and
// the requests on it end "error" naming it; the worker registers again
// and the cluster still drains.
func TestAttach_WorkerLossFailsItsRequestsNamingIt(t *testing.T) {
	t.Parallel()
	ls := services(t)
	ws := startWorkers(t, ls, "loss",
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 1}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 1}`)})
	cfg := attachConfig(ls, "loss")
	cfg.Args["speedup_ratio"] = 1
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	results := make(chan cluster.Result, 3)
	for range 3 {
		go func() {
			results <- c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 100000})
		}()
	}
	require.Eventually(t, func() bool {
		for _, w := range c.Stats().Workers {
			if w.Name == "d0" && w.Running == 3 {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "decode runs the requests")

	ec := etcdClient(t, ls)
	resp, err := ec.Get(context.Background(), plane.RegistrationPrefix("loss"), clientv3.WithPrefix())
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		var reg plane.Registration
		require.NoError(t, json.Unmarshal(kv.Value, &reg))
		if reg.Name == "d0" {
			_, err := ec.Revoke(context.Background(), clientv3.LeaseID(reg.InstanceID))
			require.NoError(t, err)
		}
	}
	for range 3 {
		r := <-results
		assert.Equal(t, cluster.OutcomeError, r.Outcome)
		assert.Contains(t, r.Error, "worker d0 lost")
	}
	// The worker lives on and registers again under a new lease.
	require.Eventually(t, func() bool {
		reg, ok := registrations(t, ec, "loss")["d0"]
		return ok && reg.InstanceID != 0 && !slices.ContainsFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return kv.Lease == reg.InstanceID })
	}, 3*plane.LeaseTTLSeconds*time.Second, 10*time.Millisecond, "d0 registered again")
	select {
	case err := <-ws.errs["d0"]:
		t.Fatalf("d0 exited: %v", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored)
	assert.EqualValues(t, 3, s.Errored)
}

// TestAttach_ClustersComeAndGoOnTheSameWorkers: workers outlive the
// clusters that use them; a second cluster's request and transfer ids
// must not collide with what the workers remember of the first's.
func TestAttach_ClustersComeAndGoOnTheSameWorkers(t *testing.T) {
	t.Parallel()
	ls := services(t)
	startWorkers(t, ls, "again",
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`)},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: []byte(`{"speedup_ratio": 10}`)})
	for range 2 {
		c, err := cluster.New(attachConfig(ls, "again"))
		require.NoError(t, err)
		for range 3 {
			r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 4})
			assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		}
		require.NoError(t, c.Close())
	}
}

// TestWorker_StopDrainsThenLeaves: a stopping worker (SIGTERM in `mocker
// worker`) refuses new requests, lets the ones it has finish, and only then
// revokes its lease.
func TestWorker_StopDrainsThenLeaves(t *testing.T) {
	t.Parallel()
	ls := services(t)
	ws := startWorkers(t, ls, "drain",
		worker.Config{Name: "w0", Role: engine.WorkerAggregated, Args: []byte(`{"speedup_ratio": 1}`)})
	c, err := cluster.New(cluster.Config{Name: "drain", Workers: 1, Args: map[string]any{"speedup_ratio": 1},
		Transport: ls.transport("drain")})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	long := make(chan cluster.Result, 1)
	go func() { long <- c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 200}) }()
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == 1 }, 30*time.Second, 5*time.Millisecond)

	ws.cancel["w0"]()
	// The worker keeps its registration while it drains, so a new
	// request still reaches it, and is refused by name.
	require.Eventually(t, func() bool {
		r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 1})
		return r.Outcome == cluster.OutcomeError && strings.Contains(r.Error, "worker w0 is draining")
	}, 30*time.Second, 5*time.Millisecond)
	r := <-long
	assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	assert.Equal(t, 200, r.OutputTokens)
	require.NoError(t, <-ws.errs["w0"])

	ec := etcdClient(t, ls)
	resp, err := ec.Get(context.Background(), "v1/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var left []string
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), plane.RouterPrefix("drain")) { // the router's, still attached
			left = append(left, string(kv.Key))
		}
	}
	assert.Empty(t, left, "the revoked lease took every key of the worker")
}
