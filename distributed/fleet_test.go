package distributed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
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

// checkFleetRegistered checks that the named workers are registered each
// under a lease of its own: distinct instance ids (each its lease's id,
// holding its key), subjects and, for prefills, transfer addresses.
func checkFleetRegistered(t *testing.T, ec *clientv3.Client, ns string, names ...string) map[string]plane.Registration {
	t.Helper()
	var regs map[string]plane.Registration
	require.Eventually(t, func() bool {
		regs = registrations(t, ec, ns)
		return len(regs) == len(names)
	}, 60*time.Second, 10*time.Millisecond, "the fleet registered")
	ids, subjects, addrs := map[int64]string{}, map[string]string{}, map[string]string{}
	for _, name := range names {
		reg, ok := regs[name]
		require.True(t, ok, "worker %s not registered; have %v", name, regs)
		require.NotZero(t, reg.InstanceID)
		_, dup := ids[reg.InstanceID]
		assert.False(t, dup, "instance id %x of %s is %s's too", reg.InstanceID, name, ids[reg.InstanceID])
		ids[reg.InstanceID] = name
		resp, err := ec.Get(context.Background(), plane.RegistrationKey(ns, reg.InstanceID))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, reg.InstanceID, resp.Kvs[0].Lease, "%s's key lives under the lease its id names", name)
		for _, s := range []string{reg.CmdSubject, reg.OutSubject} {
			require.NotEmpty(t, s)
			_, dup := subjects[s]
			assert.False(t, dup, "subject %s of %s is %s's too", s, name, subjects[s])
			subjects[s] = name
		}
		if reg.TransferAddr != "" {
			_, dup := addrs[reg.TransferAddr]
			assert.False(t, dup, "transfer address %s of %s is %s's too", reg.TransferAddr, name, addrs[reg.TransferAddr])
			addrs[reg.TransferAddr] = name
		}
	}
	return regs
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// TestFleet_InProcessWorkersRegisterServeAndDrain runs a prefill fleet of
// 3 and a decode fleet of 3, each in one RunFleet: all six register as
// workers of their own, a router's disaggregated requests run across
// every one of them, and on context cancel every worker drains and
// revokes its lease (the package's TestMain checks for leaked
// goroutines).
func TestFleet_InProcessWorkersRegisterServeAndDrain(t *testing.T) {
	t.Parallel()
	const ns = "fleet"
	ls := securedServices(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleets := map[string]chan error{}
	for prefix, role := range map[string]engine.WorkerType{"p": engine.WorkerPrefill, "d": engine.WorkerDecode} {
		errc := make(chan error, 1)
		fleets[prefix] = errc
		cfg := worker.Config{Role: role, Namespace: ns, Etcd: []string{ls.etcdURL}, NATS: ls.natsURL,
			NATSAuth: ls.natsAuth, EtcdAuth: ls.etcdAuth, Args: []byte(`{"speedup_ratio": 10}`), DrainTimeout: 10 * time.Second}
		go func() { errc <- worker.RunFleet(ctx, worker.Fleet{Config: cfg, Count: 3, NamePrefix: prefix}) }()
	}
	ec := etcdClient(t, ls)
	regs := checkFleetRegistered(t, ec, ns, append(names("p", 3), names("d", 3)...)...)
	for _, n := range names("p", 3) {
		assert.NotEmpty(t, regs[n].TransferAddr, "prefill %s advertises its own transfer server", n)
	}

	cfg := attachConfig(ls, ns)
	cfg.Prefill.Workers, cfg.Decode.Workers = 3, 3
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	const n = 24
	var mu sync.Mutex
	used := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			defer rcancel()
			r := c.Generate(rctx, cluster.Request{PromptTokens: 64 + 16*i, MaxTokens: 8})
			mu.Lock()
			defer mu.Unlock()
			if assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error) {
				used[r.PrefillWorker]++
				used[r.DecodeWorker]++
			}
		})
	}
	wg.Wait()
	for _, w := range append(names("p", 3), names("d", 3)...) {
		assert.Positive(t, used[w], "worker %s served none of the requests: %v", w, used)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := c.Drain(dctx)
	dcancel()
	require.NoError(t, err)
	assert.Equal(t, uint64(n), s.Completed)
	require.NoError(t, c.Close())

	cancel()
	for prefix, errc := range fleets {
		select {
		case err := <-errc:
			assert.NoError(t, err, "fleet %s", prefix)
		case <-time.After(30 * time.Second):
			t.Fatalf("fleet %s did not leave", prefix)
		}
	}
	resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "every worker revoked its lease on the way out")
}

// TestFleet_ProcessDrainsAllOnSIGTERM runs `mocker worker --count 4` as
// one process: four aggregated workers take a router's requests, and one
// SIGTERM while requests run drains all four (the requests complete) and
// the process exits 0 with no registration left.
func TestFleet_ProcessDrainsAllOnSIGTERM(t *testing.T) {
	t.Parallel()
	const ns = "fleet-proc"
	ls := securedServices(t)
	argv := []string{"worker", "--count", "4", "--name-prefix", "w", "--role", "aggregated", "--namespace", ns,
		"--etcd", ls.etcdURL, "--nats", ls.natsURL, "--args", `{"speedup_ratio": 10}`, "--drain-timeout", "60s"}
	require.NoError(t, ls.spawn(os.Getenv(WorkerBinaryEnv), "fleet", argv))
	ls.mu.Lock()
	ch := ls.children[0]
	ls.mu.Unlock()
	ec := etcdClient(t, ls)
	checkFleetRegistered(t, ec, ns, names("w", 4)...)

	c, err := cluster.New(cluster.Config{Name: ns, Workers: 4, Args: map[string]any{"speedup_ratio": 10}, Transport: ls.transport(ns)})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	const n = 8
	results := make(chan cluster.Result, n)
	for i := range n {
		go func() {
			results <- c.Generate(context.Background(), cluster.Request{PromptTokens: 64 + 8*i, MaxTokens: 3000})
		}()
	}
	// SIGTERM once every worker runs a request: a worker that drains
	// idle leaves at once, and a request still on its way to it would be
	// refused (a draining worker takes no new work), which is right but
	// not what this test is about.
	require.Eventually(t, func() bool {
		busy := map[string]bool{}
		for _, w := range c.Stats().Workers {
			if w.Running > 0 {
				busy[w.Name] = true
			}
		}
		return len(busy) == 4
	}, 30*time.Second, time.Millisecond, "the requests run on all four workers")
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGTERM))
	used := map[string]bool{}
	for range n {
		select {
		case r := <-results:
			assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, "a request in flight at SIGTERM finishes in the drain: %s", r.Error)
			used[r.PrefillWorker] = true
		case <-time.After(2 * time.Minute):
			t.Fatal("a request did not end")
		}
	}
	assert.Len(t, used, 4, "round-robin puts the requests on all four workers: %v", used)
	select {
	case <-ch.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the fleet process did not exit after SIGTERM")
	}
	require.NoError(t, ch.err, "exit status: %s", ch.stderr.Bytes())
	logs := string(ch.stderr.Bytes())
	assert.Equal(t, 4, strings.Count(logs, "worker drained"), logs)
	resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "every worker revoked its lease")
}

// TestFleet_AWorkerThatCannotStartFailsTheFleet: workers that cannot
// start (here their transfer servers cannot bind) end the fleet with an
// error naming the first that failed; that one failure stops the others
// is worker.TestRunFleet_AWorkerThatFailsStopsTheOthers.
func TestFleet_AWorkerThatCannotStartFailsTheFleet(t *testing.T) {
	t.Parallel()
	ls := services(t)
	cfg := worker.Config{Role: engine.WorkerPrefill, Namespace: "fleet-fail", Etcd: []string{ls.etcdURL}, NATS: ls.natsURL,
		ListenHost: "192.0.2.1", DrainTimeout: time.Second}
	err := worker.RunFleet(context.Background(), worker.Fleet{Config: cfg, Count: 3, NamePrefix: "p"})
	require.Error(t, err)
	assert.Regexp(t, `^worker p-[0-2]: transfer server \(--listen-host "192.0.2.1"`, err.Error())
	assert.False(t, worker.IsUsage(err))
	assert.False(t, errors.Is(err, context.Canceled))
}
