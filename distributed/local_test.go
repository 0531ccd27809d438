package distributed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// saturatedConfig is scripts/cascade.js's cluster: one decode worker with
// two sequence slots behind two prefill workers, so decode saturates at
// once and held prefill KV piles up. Under SGLang (destination-first) a
// reservation does not take a decode slot.
func saturatedConfig(engineName string) cluster.Config {
	cfg := cluster.Config{
		Name:    "dist-" + engineName,
		Engine:  engineName,
		Disagg:  true,
		Router:  "round-robin",
		Prefill: cluster.PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 320}},
		Decode: cluster.PoolConfig{Workers: 1, Args: map[string]any{"num_gpu_blocks": 4096, "max_num_seqs": 2,
			"reserve_takes_slot": true}},
		// Each handoff step crosses processes (a few wall ms in all), which
		// speedup_ratio turns into modeled time: a moderate speedup keeps
		// that small next to the decode's own pace.
		Args: map[string]any{"block_size": 16, "speedup_ratio": 5, "kv_bytes_per_token": 131072,
			"kv_transfer_bandwidth": 25, "kv_transfer_abort_timeout_ms": 1000},
		RouterOptions: map[string]any{"busy_threshold": 0.85},
		Transport:     &cluster.TransportConfig{Local: true},
	}
	if engineName == "sglang" {
		cfg.Decode.Args = map[string]any{"num_gpu_blocks": 4096, "max_num_seqs": 2}
	}
	return cfg
}

// TestLocal_SaturatedDisaggDrainsAndConserves runs a disaggregated cluster
// whose workers are real `mocker worker` processes over an embedded etcd
// and NATS, under far more concurrency than decode has slots, and checks
// the invariants every cluster test checks: every pool drains to zero
// held, reserved and active blocks, and every request is counted once.
func TestLocal_SaturatedDisaggDrainsAndConserves(t *testing.T) {
	for _, eng := range []string{"vllm", "sglang"} {
		t.Run(eng, func(t *testing.T) {
			cfg := saturatedConfig(eng)
			c, err := cluster.New(cfg)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			assert.Equal(t, "local", c.TransportName())

			const vus, perVU = 24, 6
			results := make(chan cluster.Result, vus*perVU)
			var wg sync.WaitGroup
			for range vus {
				wg.Go(func() {
					for range perVU {
						results <- c.Generate(context.Background(), cluster.Request{PromptTokens: 1024, MaxTokens: 32})
					}
				})
			}
			wg.Wait()
			close(results)
			counts := map[string]int{}
			for r := range results {
				counts[r.Outcome]++
				if r.Outcome != cluster.OutcomeCompleted && counts[r.Outcome] < 3 {
					t.Logf("%s: %s (pin %.1f ms, decode wait %.1f ms)", r.Outcome, r.Error, r.HoldMs, r.DecodeWaitMs)
				}
				if r.Outcome == cluster.OutcomeError {
					t.Errorf("request errored: %s", r.Error)
				}
			}
			s := drainedClean(t, c)
			assert.Len(t, s.Workers, 3)
			assert.EqualValues(t, vus*perVU, s.Requests)
			assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored, "request conservation")
			assert.Equal(t, s.Holds, s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled, "every hold ended")
			assert.EqualValues(t, counts[cluster.OutcomeCompleted], s.Completed)
			assert.Positive(t, s.Holds, "saturated decode: prefill KV was held")
			assert.Positive(t, s.Completed)
			require.NoError(t, c.CheckInvariants())
			t.Logf("%s: %v; holds %d (released %d, aborted %d), peak held %d", eng, counts, s.Holds, s.HoldsReleased, s.HoldsAborted, s.PeakHeldBlocks)
		})
	}
}

// TestLocal_DecodeKilledFailsItsRequestsAndHoldsAbort kills a decode worker
// process (no drain, no revoke) while prefill KV is held for it: once its
// lease expires the router drops it and fails its requests naming it, and
// the prefill's holds for it end at their own abort timeout, so the
// prefill pool drains.
func TestLocal_DecodeKilledFailsItsRequestsAndHoldsAbort(t *testing.T) {
	cfg := saturatedConfig("vllm")
	cfg.Name = "killed"
	cfg.Prefill.Workers = 1
	// No hold may end before the kill, however slow the host: 4 wall
	// seconds, well inside the 10 s the dead worker's lease outlives it.
	cfg.Args["kv_transfer_abort_timeout_ms"] = 20000
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const n = 6
	results := make(chan cluster.Result, n)
	for range n {
		go func() {
			results <- c.Generate(context.Background(), cluster.Request{PromptTokens: 256, MaxTokens: 5000})
		}()
	}
	require.Eventually(t, func() bool {
		s := c.Stats()
		for _, w := range s.Workers {
			if w.Name == "decode-0" {
				return s.Holds >= n && w.Running == 2
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond, "decode busy and holds waiting for it")

	pid := c.Transport().(*transport).local.pids()["decode-0"]
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for range n {
		r := <-results
		assert.Equal(t, cluster.OutcomeError, r.Outcome)
		assert.Contains(t, r.Error, "worker decode-0 lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.HeldBlocks+s.ReservedBlocks+s.ActiveBlocks, "the prefill drained; the dead decode counts nothing")
	assert.EqualValues(t, n, s.Errored)
	assert.Equal(t, s.Holds, s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled, "every hold ended")
	assert.Positive(t, s.HoldsAborted, "the holds waiting for the dead decode ended at their abort timeout")
}

// drainedClean drains c and checks that no worker holds, reserves or runs
// anything; it returns the drained stats.
func drainedClean(t *testing.T, c *cluster.Cluster) cluster.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	for _, w := range s.Workers {
		assert.Zero(t, w.HeldBlocks, "%s held", w.Name)
		assert.Zero(t, w.ReservedBlocks, "%s reserved", w.Name)
		assert.Zero(t, w.ActiveBlocks, "%s active", w.Name)
		assert.Zero(t, w.Running+w.Waiting+w.HeldRequests, "%s busy", w.Name)
	}
	return s
}

// TestLocal_StaleEtcdDataIsRemoved: the data directory of a run killed
// before it could clean up is removed by the next run; a live run's, and
// anything else, is not.
func TestLocal_StaleEtcdDataIsRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run()) // its pid is now free
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Join(p, "member"), 0o700))
		return p
	}
	stale := mk(fmt.Sprintf("%s%d-123", etcdDirPrefix, dead.Process.Pid))
	live := mk(fmt.Sprintf("%s%d-456", etcdDirPrefix, os.Getppid()))
	other := mk("mocker-etcd-789")
	removeStaleEtcdDirs(dir)
	assert.NoDirExists(t, stale)
	assert.DirExists(t, live)
	assert.DirExists(t, other)
}

// TestLocal_NoEventPlane checks that local mode's workers leave Dynamo's
// event plane unpublished: their NATS takes only the run's own random
// credentials, so no Dynamo tool could read it, and mocker's router takes
// the same KV events and load from the frames (which the same
// subscription sees).
func TestLocal_NoEventPlane(t *testing.T) {
	c, err := cluster.New(cluster.Config{Name: "quiet", Disagg: true, Args: map[string]any{"speedup_ratio": 1000},
		Transport: &cluster.TransportConfig{Local: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ls := c.Transport().(*transport).local
	nc, err := plane.DialNATS(ls.natsURL, "observer", ls.natsAuth)
	require.NoError(t, err)
	defer nc.Close()
	var events, frames atomic.Int64
	sub, err := nc.Subscribe("namespace.>", func(*nats.Msg) { events.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	fsub, err := nc.Subscribe("mocker.>", func(*nats.Msg) { frames.Add(1) })
	require.NoError(t, err)
	defer func() { _ = fsub.Unsubscribe() }()
	require.NoError(t, nc.Flush())
	for range 4 {
		r := c.Generate(context.Background(), cluster.Request{PromptTokens: 128, MaxTokens: 2})
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	}
	require.NoError(t, nc.Flush())
	assert.Positive(t, frames.Load(), "the subscription saw the request plane")
	assert.Zero(t, events.Load(), "event-plane messages")
}

// TestLocal_LoadOnlyPassesShareFrames: a worker on its own clock does not
// send a frame per decode pass. A pass that reports only the worker's
// load waits up to plane.AckDelay for company, so a long decode's passes
// go several to a frame, while its first token, KV events and completion
// still go at once.
func TestLocal_LoadOnlyPassesShareFrames(t *testing.T) {
	const maxTokens = 256
	c, err := cluster.New(cluster.Config{Name: "passes", Workers: 1, Args: map[string]any{"speedup_ratio": 5},
		Transport: &cluster.TransportConfig{Local: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ls := c.Transport().(*transport).local
	published := func() (n int64) {
		cz, err := ls.nats.Connz(&natsserver.ConnzOptions{})
		require.NoError(t, err)
		for _, conn := range cz.Conns {
			if conn.Name != "mocker-router" {
				n += conn.InMsgs
			}
		}
		return n
	}
	before := published()
	r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: maxTokens})
	require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	frames := published() - before
	t.Logf("%d frames for %d decode passes (%.0f modeled ms)", frames, maxTokens, r.E2EMs)
	assert.Less(t, frames, int64(maxTokens/4), "frames for one request's passes")
}

// TestLocal_WorkersRunOnOneP: local mode starts its workers with
// GOMAXPROCS=1 (a worker's loop is one goroutine; more Ps only spin),
// unless the run's environment sets GOMAXPROCS, which they then inherit.
func TestLocal_WorkersRunOnOneP(t *testing.T) {
	want := "GOMAXPROCS=1"
	if v, set := os.LookupEnv("GOMAXPROCS"); set {
		want = "GOMAXPROCS=" + v
	}
	c, err := cluster.New(cluster.Config{Name: "onep", Workers: 1, Transport: &cluster.TransportConfig{Local: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ls := c.Transport().(*transport).local
	ls.mu.Lock()
	defer ls.mu.Unlock()
	require.NotEmpty(t, ls.children)
	for _, ch := range ls.children {
		var got []string
		for _, kv := range ch.cmd.Env {
			if strings.HasPrefix(kv, "GOMAXPROCS=") {
				got = append(got, kv)
			}
		}
		assert.Equal(t, []string{want}, got, ch.name)
	}
}
