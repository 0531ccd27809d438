package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvstrand/mocker/cluster"
	_ "github.com/kvstrand/mocker/distributed" // the etcd + NATS transport behind cluster.Config.Transport
)

// The fault tests drive a cluster from the test process through the Go
// API, so they can read every request's outcome and error, and break the
// stack underneath it: kill, freeze or partition a worker, restart etcd or
// NATS. Each asserts that nothing is lost: every request ends completed,
// aborted, rejected or with an error that names what failed; every hold
// ends; every pool that is still there drains to zero.

// faultPrompt is the request every fault test sends: 512 prompt tokens is
// 32 blocks, and 16 output tokens keep a decode short.
var faultPrompt = cluster.Request{PromptTokens: 512, MaxTokens: 16}

// faultAbortMs is the fault tests' abort timeout (modeled ms). It is
// longer than the matrix's: these tests run the router in the test
// process, under the race detector when `make test` runs them, and a
// handoff crosses processes five times; at speedup_ratio 10 a few tens of
// wall ms per crossing would make a 400 ms timeout abort handoffs that
// nothing broke. 2 s (200 ms of wall time) still did, once, on a 2-core
// CI run with every package's race tests beside it: two handoffs from the
// reachable prefill of TestFault_PartitionAbortsTheHandoff aborted. 5 s
// is 500 ms of wall time, still far below the seconds a dead peer takes
// to show.
const faultAbortMs = 5000

// faultArgs are the fault tests' engine args, for workers and cluster.
func faultArgs() map[string]any {
	a := commonArgs()
	a["kv_transfer_abort_timeout_ms"] = faultAbortMs
	return a
}

// leaseTTL is the workers' etcd lease TTL (distributed/internal/plane.LeaseTTLSeconds):
// a worker that stops renewing is gone from etcd within it.
const leaseTTL = 10 * time.Second

// attach builds a cluster over the workers registered in ns.
func (s *stack) attach(t *testing.T, ns, engine, router string, prefill, decode int) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{
		Name: "fault-" + ns, Engine: engine, Disagg: true, Router: router,
		Prefill: cluster.PoolConfig{Workers: prefill}, Decode: cluster.PoolConfig{Workers: decode},
		Args:      faultArgs(),
		Transport: &cluster.TransportConfig{Etcd: s.etcd.Endpoints(), NATS: s.nats.URL(), Namespace: ns},
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// requestTimeout bounds one request of a fault test (wall time): a request
// still open then was lost by the distributed path, and ends "error" with
// the context's deadline in its message, which the assertions report.
const requestTimeout = 45 * time.Second

// load runs vus concurrent clients of perVU requests each and returns
// every result.
func load(c *cluster.Cluster, vus, perVU int) []cluster.Result {
	out := make([]cluster.Result, vus*perVU)
	var wg sync.WaitGroup
	for v := range vus {
		wg.Go(func() {
			for i := range perVU {
				ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
				out[v*perVU+i] = c.Generate(ctx, faultPrompt)
				cancel()
			}
		})
	}
	wg.Wait()
	return out
}

// outcomes counts results by outcome.
func outcomes(rs []cluster.Result) map[string]int {
	n := map[string]int{}
	for _, r := range rs {
		n[r.Outcome]++
	}
	return n
}

// drainClean drains the cluster and asserts the invariants of docs/design.md §6
// over what is left: every live pool at zero held, reserved and active
// blocks, every request counted once, every hold ended.
func drainClean(t *testing.T, c *cluster.Cluster) cluster.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err, "drain")
	for _, w := range s.Workers {
		assert.Zero(t, w.HeldBlocks, "%s held blocks after drain", w.Name)
		assert.Zero(t, w.ReservedBlocks, "%s reserved blocks after drain", w.Name)
		assert.Zero(t, w.ActiveBlocks, "%s active blocks after drain", w.Name)
		assert.Zero(t, w.Running+w.Waiting+w.HeldRequests, "%s requests after drain", w.Name)
	}
	assert.Zero(t, s.InFlight, "requests in flight after drain")
	assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored, "request conservation")
	assert.Equal(t, s.Holds, s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled, "every hold ended")
	return s
}

// etcdClient is a client of the stack's etcd for the test's own checks.
func (s *stack) etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	ec, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ec.Close() })
	return ec
}

// registered lists the names of the workers registered in ns.
func registered(t *testing.T, ec *clientv3.Client, ns string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := ec.Get(ctx, "v1/mocker/"+ns+"/", clientv3.WithPrefix())
	require.NoError(t, err)
	var names []string
	for _, kv := range resp.Kvs {
		// The registration is JSON with a "name"; a substring is enough
		// for a test that knows the names.
		v := string(kv.Value)
		if i := strings.Index(v, `"name":"`); i >= 0 {
			rest := v[i+len(`"name":"`):]
			names = append(names, rest[:strings.IndexByte(rest, '"')])
		}
	}
	return names
}

// waitUnregistered waits until name's registration is gone from etcd and
// returns how long that took.
func waitUnregistered(t *testing.T, ec *clientv3.Client, ns, name string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if !slices.Contains(registered(t, ec, ns), name) {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s still registered in etcd after %s", name, limit)
	return 0
}

// TestFault_DecodeKilled kills a decode worker (SIGKILL: no drain, no
// lease revocation) while it is saturated — requests decoding on it,
// reserved on it, transfers to it under way — and keeps clients sending
// while its registration lingers. Until its lease expires the router still
// hands it work: the prefill holds KV for it, nothing answers, and those
// holds end at the prefill's own abort timeout, so no block stays pinned.
// Once etcd drops the registration the router removes it and every request
// that was on it fails with an error naming it; the other decode carries
// on, and a batch after the loss completes on it alone.
func TestFault_DecodeKilled(t *testing.T) {
	s := newStack(t)
	ns := "fault-kill"
	ws := s.startWorkers(t, ns, "vllm", faultArgs(),
		pool{role: "prefill", n: 1, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 2, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 2}})
	c := s.attach(t, ns, "vllm", "round-robin", 1, 2)
	ec := s.etcdClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Clients keep sending until the router has removed the dead worker.
	var (
		mu      sync.Mutex
		results []cluster.Result
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, rcancel := context.WithTimeout(context.Background(), requestTimeout)
				r := c.Generate(rctx, faultPrompt)
				rcancel()
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	// Kill once decode-1 is busy and prefill KV waits on the decodes.
	require.Eventually(t, func() bool {
		st := c.Stats()
		for _, w := range st.Workers {
			if w.Name == "decode-1" && w.Running > 0 && st.HeldBlocks > 0 {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "decode-1 never busy with prefill KV held")
	require.NoError(t, ws["decode-1"].Kill(ctx))
	gone := waitUnregistered(t, ec, ns, "decode-1", leaseTTL+5*time.Second)
	t.Logf("decode-1 killed mid-run; its lease expired and its registration went %s later", gone.Round(100*time.Millisecond))
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	n := outcomes(results)
	t.Logf("outcomes: %v", n)
	lost := 0
	for _, r := range results {
		switch r.Outcome {
		case cluster.OutcomeCompleted:
		case cluster.OutcomeAborted:
			// A hold that waited on a decode past the abort timeout (the
			// lost one, or the survivor while it carried the load).
			assert.Equal(t, "aborted", r.HoldOutcome, "an aborted request's hold ended by the timeout: %s", r.Error)
		case cluster.OutcomeError:
			assert.Contains(t, r.Error, "worker decode-1 lost",
				"an error must name the lost worker (request on %s → %s, transfer %d, hold %q after %.0f ms)",
				r.PrefillWorker, r.DecodeWorker, r.TransferID, r.HoldOutcome, r.HoldMs)
			lost++
		default:
			t.Errorf("request ended %q: %s", r.Outcome, r.Error)
		}
		if r.HoldOutcome == "aborted" {
			assert.InDelta(t, faultAbortMs, r.HoldMs, faultAbortMs/4, "a hold ends at the abort timeout")
		}
	}
	assert.Positive(t, lost, "requests waiting on decode-1 fail naming it")
	assert.Positive(t, n[cluster.OutcomeCompleted], "decode-0 kept serving")

	after := load(c, 4, 2)
	for _, r := range after {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, "after the loss: %s", r.Error)
		assert.Equal(t, "decode-0", r.DecodeWorker, "the lost decode is out of routing")
	}
	st := drainClean(t, c)
	assert.Positive(t, st.HoldsAborted, "holds for the dead decode ended at the abort timeout")
}

// TestFault_PartitionAbortsTheHandoff cuts one prefill worker off the data
// network (docker network disconnect) while etcd and NATS still reach it:
// a decode cannot reach its transfer server, so its holds run into the
// abort timeout and its requests end "aborted" — the ABORT path, not a
// hang. The other prefill's requests complete. Once the healed network
// carries traffic again, the cut-off prefill completes every handoff.
func TestFault_PartitionAbortsTheHandoff(t *testing.T) {
	s := newStack(t)
	ns := "fault-partition"
	ws := s.startWorkers(t, ns, "vllm", faultArgs(),
		pool{role: "prefill", n: 2, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 1, args: map[string]any{"num_gpu_blocks": 2048, "max_num_seqs": 16}})
	c := s.attach(t, ns, "vllm", "round-robin", 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, ws["prefill-1"].Partition(ctx))

	during := load(c, 6, 2)
	t.Logf("during the partition: %v", outcomes(during))
	for _, r := range during {
		switch r.PrefillWorker {
		case "prefill-1":
			assert.Equal(t, cluster.OutcomeAborted, r.Outcome, "a handoff from the cut-off prefill: %s", r.Error)
			assert.Equal(t, "aborted", r.HoldOutcome)
			assert.InDelta(t, faultAbortMs, r.HoldMs, faultAbortMs/4, "the hold ends at the abort timeout")
		case "prefill-0":
			assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, "a handoff from the reachable prefill: %s", r.Error)
		default:
			t.Errorf("request on %q ended %s: %s", r.PrefillWorker, r.Outcome, r.Error)
		}
	}

	require.NoError(t, ws["prefill-1"].Heal(ctx))
	// Docker's reconnect takes a moment to carry traffic: a decode's
	// first SYN to the healed prefill can be lost, and its retry (after
	// a second of wall time) comes past the abort timeout at this
	// speedup. Wait until a handoff from the healed prefill completes.
	healed, tries := false, 0
	for deadline := time.Now().Add(30 * time.Second); !healed && time.Now().Before(deadline); tries++ {
		r := load(c, 1, 1)[0]
		healed = r.PrefillWorker == "prefill-1" && r.Outcome == cluster.OutcomeCompleted
	}
	require.True(t, healed, "no handoff from the healed prefill completed within 30 s (%d requests)", tries)
	t.Logf("the healed prefill completed a handoff after %d requests", tries)
	after := load(c, 4, 2)
	for _, r := range after {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, "after healing, on %s: %s", r.PrefillWorker, r.Error)
	}
	assert.Contains(t, prefills(after), "prefill-1", "the healed prefill serves again")
	drainClean(t, c)
}

// prefills and decodes list the workers that served rs, in order of first
// appearance.
func prefills(rs []cluster.Result) []string {
	return workersOf(rs, func(r cluster.Result) string { return r.PrefillWorker })
}

func decodes(rs []cluster.Result) []string {
	return workersOf(rs, func(r cluster.Result) string { return r.DecodeWorker })
}

func workersOf(rs []cluster.Result, name func(cluster.Result) string) []string {
	var out []string
	for _, r := range rs {
		if n := name(r); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TestFault_LeaseExpiryRemovesTheWorker freezes a decode worker (docker
// pause): it stops renewing its lease without saying so, as a hung host
// would. Within the TTL etcd drops its registration, the router takes it
// out of routing, and what was on it fails naming it; new requests go to
// the other decode only, until the worker, thawed, registers again.
func TestFault_LeaseExpiryRemovesTheWorker(t *testing.T) {
	s := newStack(t)
	ns := "fault-lease"
	ws := s.startWorkers(t, ns, "vllm", faultArgs(),
		pool{role: "prefill", n: 1, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 2, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}})
	c := s.attach(t, ns, "vllm", "round-robin", 1, 2)
	ec := s.etcdClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	before := load(c, 4, 2)
	assert.ElementsMatch(t, []string{"decode-0", "decode-1"}, decodes(before), "both decodes serve before")

	require.NoError(t, ws["decode-1"].Pause(ctx))
	// Requests sent now wait on the frozen worker until it is removed.
	var stuck []cluster.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		stuck = load(c, 2, 1)
	}()
	gone := waitUnregistered(t, ec, ns, "decode-1", leaseTTL+5*time.Second)
	t.Logf("decode-1 frozen; its registration expired %s later", gone.Round(100*time.Millisecond))
	assert.LessOrEqual(t, gone, leaseTTL+2*time.Second, "removed within the lease TTL (plus etcd's expiry sweep)")
	<-done
	for _, r := range stuck {
		if r.Outcome != cluster.OutcomeCompleted {
			assert.Equal(t, cluster.OutcomeError, r.Outcome)
			assert.Contains(t, r.Error, "worker decode-1 lost")
		}
	}

	after := load(c, 4, 2)
	for _, r := range after {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	}
	assert.Equal(t, []string{"decode-0"}, decodes(after), "the expired worker is out of routing")
	// Thawed, it finds its lease gone, withdraws what it had and
	// registers again under a new lease; the router takes it back.
	require.NoError(t, ws["decode-1"].Unpause(ctx))
	require.Eventually(t, func() bool { return slices.Contains(registered(t, ec, ns), "decode-1") },
		leaseTTL+10*time.Second, 200*time.Millisecond, "decode-1 registered again")
	require.Eventually(t, func() bool {
		return slices.Contains(decodes(load(c, 2, 2)), "decode-1")
	}, 30*time.Second, 100*time.Millisecond, "decode-1 serves again")
	drainClean(t, c)
}

// TestFault_RouterKilled kills (SIGKILL) a `mocker run` process whose
// requests are decoding on the workers: no goodbye reaches them, but its
// router key's lease expires, and the workers withdraw its requests, so
// their pools drain for the routers still there (one observes them).
func TestFault_RouterKilled(t *testing.T) {
	s := newStack(t)
	ns := "fault-router"
	s.startWorkers(t, ns, "vllm", faultArgs(),
		pool{role: "prefill", n: 1, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 1, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}})
	observer := s.attach(t, ns, "vllm", "round-robin", 1, 1)
	busy := func() (running, blocks int) {
		for _, w := range observer.Stats().Workers {
			running += w.Running + w.Waiting + w.HeldRequests
			blocks += w.ActiveBlocks + w.HeldBlocks + w.ReservedBlocks
		}
		return running, blocks
	}

	args, err := json.Marshal(faultArgs())
	require.NoError(t, err)
	const vus = 4
	var out bytes.Buffer
	cmd := exec.Command(mockerBin, "run", "-q", "--no-color", "--include-system-env-vars=false",
		"-e", "ETCD="+strings.Join(s.etcd.Endpoints(), ","), "-e", "NATS="+s.nats.URL(), "-e", "NS="+ns,
		"-e", "ARGS="+string(args), "-e", fmt.Sprint("VUS=", vus), filepath.Join("testdata", "long_requests.js"))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	require.Eventually(t, func() bool { n, _ := busy(); return n == vus }, time.Minute, 20*time.Millisecond,
		"the doomed router's requests never all ran: %+v\n%s", observer.Stats().Workers, &out)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool { n, b := busy(); return n == 0 && b == 0 }, leaseTTL+10*time.Second, 20*time.Millisecond,
		"the killed router's requests still run on the workers: %+v", observer.Stats().Workers)
	took := time.Since(killed)
	t.Logf("router killed; the workers withdrew its requests %s later", took.Round(100*time.Millisecond))
	assert.LessOrEqual(t, took, leaseTTL+3*time.Second, "within the router's lease TTL (plus etcd's expiry sweep)")

	for _, r := range load(observer, 2, 2) {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	}
	drainClean(t, observer)
}

// TestFault_EtcdRestart restarts etcd under a running cluster. Requests
// do not touch etcd, so they go on; the workers' keep-alives reconnect and
// their registrations survive (checked after more than a lease TTL), and
// the router's watch resumes: a decode started after the restart joins
// routing.
func TestFault_EtcdRestart(t *testing.T) {
	s := newStack(t)
	ns := "fault-etcd"
	common := faultArgs()
	s.startWorkers(t, ns, "vllm", common,
		pool{role: "prefill", n: 1, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 1, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}})
	c := s.attach(t, ns, "vllm", "round-robin", 1, 1)

	var during []cluster.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		during = load(c, 4, 6)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	restarted := time.Now()
	require.NoError(t, s.etcd.Restart(ctx))
	t.Logf("etcd restarted in %s", time.Since(restarted).Round(100*time.Millisecond))
	<-done
	assert.Equal(t, map[string]int{cluster.OutcomeCompleted: len(during)}, outcomes(during), "requests during the restart")

	// Past one TTL after the restart the registrations are still there:
	// the workers kept their leases alive through it.
	time.Sleep(leaseTTL + 2*time.Second - time.Since(restarted))
	ec := s.etcdClient(t)
	assert.ElementsMatch(t, []string{"prefill-0", "decode-0"}, registered(t, ec, ns), "registrations after the restart")

	s.startWorkers(t, ns, "vllm", common, pool{role: "decode", n: 1, first: 1, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}})
	var after []cluster.Result
	require.Eventually(t, func() bool {
		after = append(after, load(c, 2, 2)...)
		return slices.Contains(decodes(after), "decode-1")
	}, 20*time.Second, 100*time.Millisecond, "a decode registered after the restart joins routing")
	for _, r := range after {
		assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	}
	drainClean(t, c)
}

// TestFault_NATSRestart restarts NATS between two batches. The router and
// the workers reconnect on their own (nats.go, unlimited reconnects) and
// resubscribe; the second batch completes, and the KV events flow again:
// under the kv router the repeated prefix is found cached.
func TestFault_NATSRestart(t *testing.T) {
	s := newStack(t)
	ns := "fault-nats"
	s.startWorkers(t, ns, "vllm", faultArgs(),
		pool{role: "prefill", n: 2, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 1, args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}})
	c := s.attach(t, ns, "vllm", "kv", 2, 1)

	req := cluster.Request{PromptTokens: 512, MaxTokens: 16, Prefix: "after-restart", PrefixTokens: 384}
	before := load(c, 4, 2)
	assert.Equal(t, map[string]int{cluster.OutcomeCompleted: len(before)}, outcomes(before))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.nats.Restart(ctx))
	// Wait until the router and the three workers are connected again,
	// so the batch measures routing after the restart, not recovery (the
	// next test restarts NATS under load).
	require.Eventually(t, func() bool { return natsConnections(t, s) >= 4 }, 30*time.Second, 100*time.Millisecond,
		"router and workers reconnect to NATS")

	first := c.Generate(ctx, req)
	require.Equal(t, cluster.OutcomeCompleted, first.Outcome, first.Error)
	// The first request's KV events reach the router's indexer through
	// the restarted NATS; give them a moment, then the same prefix goes
	// back to the worker that cached it.
	time.Sleep(200 * time.Millisecond)
	for range 4 {
		r := c.Generate(ctx, req)
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, first.PrefillWorker, r.PrefillWorker, "kv routing follows the prefix after the restart")
		assert.GreaterOrEqual(t, r.CachedTokens, 384, "the prefix is found cached")
	}
	drainClean(t, c)
}

// TestFault_NATSRestartWithRequestsInFlight restarts NATS while requests
// are in every phase of their handoff: commands and frames published
// during the outage, or before the other side resubscribed, are lost by
// NATS, and the request plane sends them again (distributed/internal/plane).
// Every request completes with all its tokens, and the cluster drains.
func TestFault_NATSRestartWithRequestsInFlight(t *testing.T) {
	s := newStack(t)
	ns := "fault-nats-live"
	args := faultArgs()
	// No hold may end on its timeout while NATS is away: the point is
	// that nothing is lost, not how holds age.
	args["kv_transfer_abort_timeout_ms"] = 600000
	s.startWorkers(t, ns, "vllm", args,
		pool{role: "prefill", n: 2, args: map[string]any{"num_gpu_blocks": 1024}},
		pool{role: "decode", n: 1, args: map[string]any{"num_gpu_blocks": 2048, "max_num_seqs": 8}})
	c, err := cluster.New(cluster.Config{
		Name: "fault-" + ns, Engine: "vllm", Disagg: true, Router: "round-robin",
		Prefill: cluster.PoolConfig{Workers: 2}, Decode: cluster.PoolConfig{Workers: 1},
		Args:      args,
		Transport: &cluster.TransportConfig{Etcd: s.etcd.Endpoints(), NATS: s.nats.URL(), Namespace: ns},
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })

	const vus, perVU, maxTokens = 8, 4, 200
	req := cluster.Request{PromptTokens: 512, MaxTokens: maxTokens}
	results := make([]cluster.Result, vus*perVU)
	var wg sync.WaitGroup
	for v := range vus {
		wg.Go(func() {
			for i := range perVU {
				// Generous: a request still open then was lost.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				results[v*perVU+i] = c.Generate(ctx, req)
				cancel()
			}
		})
	}
	require.Eventually(t, func() bool {
		for _, w := range c.Stats().Workers {
			if w.Name == "decode-0" && w.Running >= 4 {
				return true
			}
		}
		return false
	}, time.Minute, 5*time.Millisecond, "requests decoding before the restart")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.nats.Restart(ctx))
	wg.Wait()
	assert.Equal(t, map[string]int{cluster.OutcomeCompleted: len(results)}, outcomes(results), "requests across the restart")
	for _, r := range results {
		if r.Outcome == cluster.OutcomeCompleted {
			assert.Equal(t, maxTokens, r.OutputTokens, "tokens of a request on %s → %s", r.PrefillWorker, r.DecodeWorker)
		} else {
			t.Logf("%s on %s → %s: %s", r.Outcome, r.PrefillWorker, r.DecodeWorker, r.Error)
		}
	}
	st := drainClean(t, c)
	assert.EqualValues(t, len(results), st.Completed, "every request completed once")
}

// natsConnections reads the number of client connections from NATS's
// monitoring endpoint.
func natsConnections(t *testing.T, s *stack) int {
	t.Helper()
	var v struct {
		Connections int `json:"connections"`
	}
	if err := getJSON(s.nats.MonitorURL()+"/varz", &v); err != nil {
		return 0
	}
	return v.Connections
}

// getJSON fetches a URL's JSON into v, without keeping the connection (an
// idle keep-alive would outlive the test).
func getJSON(url string, v any) error {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
