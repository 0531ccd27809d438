package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/containers"
	_ "github.com/kvstrand/mocker/distributed" // the transport
)

// stack is etcd, NATS and the network worker containers join.
type stack struct {
	net   string
	etcd  *containers.Etcd
	nats  *containers.NATS
	image string
}

func startStack(t *testing.T) *stack {
	t.Helper()
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{containers.LabelOwner: "1"}))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, nw.Remove(context.Background())) })
	s := &stack{net: nw.Name}
	s.etcd = containers.EtcdForTest(t, containers.WithNetwork(nw.Name, "etcd"))
	s.nats = containers.NATSForTest(t, containers.WithNetwork(nw.Name, "nats"))
	s.image, err = containers.BuildWorkerImage(ctx)
	require.NoError(t, err)
	return s
}

// worker starts one `mocker worker` container; decode workers dial a
// prefill's transfer server at its network alias, never at loopback.
func (s *stack) worker(t *testing.T, ns, name, role, engineName string, args map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argsJSON, err := json.Marshal(args)
	require.NoError(t, err)
	alias := ns + "-" + name
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: s.image,
			Cmd: []string{"worker", "--name", name, "--role", role, "--engine", engineName, "--namespace", ns,
				"--etcd", s.etcd.NetworkEndpoints()[0], "--nats", s.nats.NetworkURL(), "--args", string(argsJSON),
				"--listen-host", "0.0.0.0", "--advertise-host", alias},
			Networks:       []string{s.net},
			NetworkAliases: map[string][]string{s.net: {alias}},
			Labels:         map[string]string{containers.LabelOwner: "1"},
			WaitingFor:     wait.ForLog("worker registered").WithStartupTimeout(2 * time.Minute),
		},
		Started: true,
	})
	if ctr != nil {
		t.Cleanup(func() {
			if t.Failed() {
				if rc, err := ctr.Logs(context.Background()); err == nil {
					out, _ := io.ReadAll(rc)
					_ = rc.Close()
					t.Logf("%s logs:\n%s", name, out)
				}
			}
			// docker stop sends SIGTERM: the worker drains and revokes its
			// lease.
			assert.NoError(t, ctr.Terminate(context.Background()))
		})
	}
	require.NoError(t, err)
}

// args are every worker's and every cell's engine arguments: they must
// agree on block_size and speedup_ratio.
var args = map[string]any{"speedup_ratio": 5, "kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25,
	"kv_transfer_abort_timeout_ms": 1000}

// TestMatrix runs a saturating disaggregated scenario for every router
// mode and engine over worker containers: decode has two sequence slots
// for far more concurrent requests. Each cell checks that holds happen,
// that SGLang's destination-first order strands nothing, and that every
// pool drains to zero held, reserved and active blocks with every request
// counted once.
func TestMatrix(t *testing.T) {
	s := startStack(t)
	for _, eng := range []string{"vllm", "sglang"} {
		t.Run(eng, func(t *testing.T) {
			ns := "e2e-" + eng
			s.worker(t, ns, "prefill-0", "prefill", eng, args)
			s.worker(t, ns, "prefill-1", "prefill", eng, args)
			decode := map[string]any{"max_num_seqs": 2}
			if eng == "vllm" {
				// a reservation holds a decode slot until its request ends
				// (mocker's former rule): the holds queue for two slots and
				// some outlast the abort timeout
				decode["reserve_takes_slot"] = true
			}
			s.worker(t, ns, "decode-0", "decode", eng, merge(args, decode))
			cached := map[string]int{}
			for _, mode := range []string{"round-robin", "kv", "least-loaded"} {
				t.Run(mode, func(t *testing.T) { cached[mode] = cell(t, s, ns, eng, mode) })
			}
			// A conversation's later turns: kv routing sends them where
			// the prefix is cached; the others spread them over both
			// prefill workers, which each compute it once.
			assert.Greater(t, cached["kv"], cached["round-robin"], "kv routing finds more cached prefix tokens")
			assert.Greater(t, cached["kv"], cached["least-loaded"], "kv routing finds more cached prefix tokens")
		})
	}
}

// cell runs one router mode and returns the prompt tokens found cached.
func cell(t *testing.T, s *stack, ns, eng, mode string) int {
	start := time.Now()
	c, err := cluster.New(cluster.Config{
		Name: ns + "-" + mode, Engine: eng, Router: mode, Disagg: true, Args: args,
		Transport: &cluster.TransportConfig{Etcd: s.etcd.Endpoints(), NATS: s.nats.URL(), Namespace: ns},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const vus, perVU = 16, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	cached := 0
	for v := range vus {
		wg.Go(func() {
			for range perVU {
				// one conversation per VU, named per cell: the workers
				// outlive the cell, and must not have seen it cached
				r := c.Generate(context.Background(), cluster.Request{PromptTokens: 512, MaxTokens: 16,
					Prefix: fmt.Sprintf("%s-user-%d", mode, v), PrefixTokens: 448})
				mu.Lock()
				counts[r.Outcome]++
				cached += r.CachedTokens
				mu.Unlock()
				assert.NotEqual(t, cluster.OutcomeError, r.Outcome, r.Error)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.Drain(ctx)
	require.NoError(t, err)
	for _, w := range st.Workers {
		assert.Zero(t, w.HeldBlocks+w.ReservedBlocks+w.ActiveBlocks, "%s drained", w.Name)
	}
	assert.EqualValues(t, vus*perVU, st.Requests)
	assert.Equal(t, st.Requests, st.Completed+st.Aborted+st.Rejected+st.Errored)
	assert.Equal(t, st.Pins, st.PinsReleased+st.PinsAborted+st.PinsCancelled)
	assert.Positive(t, st.Pins, "prefill KV was held")
	if eng == "sglang" {
		assert.Zero(t, st.PinsAborted, "destination-first strands nothing")
	} else {
		assert.Positive(t, st.PinsAborted, "source-first: holds outlast the abort timeout while decode is saturated")
	}
	require.NoError(t, c.CheckInvariants())
	t.Logf("%s/%s: %v, holds %d (aborted %d), cached tokens %d, %s", eng, mode, counts, st.Pins, st.PinsAborted, cached,
		time.Since(start).Round(time.Millisecond))
	return cached
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
