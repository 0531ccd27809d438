package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// The scenarios of Dynamo's own router end-to-end tests with mockers
// (tests/router/test_router_e2e_with_mockers.py in Dynamo), here over etcd, NATS and worker
// containers: the kv router sends a prompt to the worker that has its
// longest prefix cached, every time; under a busy threshold an overloaded
// cluster refuses with "all workers busy", counted, and nothing else
// fails; a disaggregated conversation sticks to one prefill worker.

// attachWith builds a cluster over the workers registered in ns, with
// router options.
func (s *stack) attachWith(t *testing.T, ns string, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	cfg.Name = "dynamo-" + ns
	cfg.Args = commonArgs()
	// Coupled: the cluster drives the workers' clocks, so the round trips
	// between processes take no modeled time however busy the host is.
	cfg.Transport = &cluster.TransportConfig{Etcd: s.etcd.Endpoints(), NATS: s.nats.URL(), Namespace: ns, Coupled: true}
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// turnOf is one turn of conversation conv: a prompt of n tokens whose
// first history tokens the conversation's turns share (the cluster derives
// them from the prefix name) and whose tail is this turn's own.
func turnOf(conv, n, history int) cluster.Request {
	return cluster.Request{PromptTokens: n, Prefix: fmt.Sprintf("conversation-%d", conv), PrefixTokens: history, MaxTokens: 8}
}

func generate(t *testing.T, c *cluster.Cluster, req cluster.Request) cluster.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return c.Generate(ctx, req)
}

// TestDynamo_KVRoutingPicksTheLongestCachedPrefix: three aggregated
// workers behind the kv router. Each of three conversations is warmed on
// whichever worker the router picks; every later turn of a conversation
// (the same 768-token history, a new 256-token tail) goes back to that
// worker — the one with the longest cached prefix — and finds the history
// cached, turn after turn.
func TestDynamo_KVRoutingPicksTheLongestCachedPrefix(t *testing.T) {
	s := newStack(t)
	const ns = "dyn-kv"
	s.startWorkers(t, ns, "vllm", commonArgs(), pool{role: "aggregated", n: 3})
	c := s.attachWith(t, ns, cluster.Config{Engine: "vllm", Router: "kv", Workers: 3})

	home := map[int]string{}
	for conv := range 3 {
		r := generate(t, c, turnOf(conv, 1024, 768))
		require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
		home[conv] = r.PrefillWorker
	}
	for turn := 1; turn <= 4; turn++ {
		for conv := range 3 {
			r := generate(t, c, turnOf(conv, 1024, 768))
			require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
			assert.Equal(t, home[conv], r.PrefillWorker, "conversation %d, turn %d: routed to the worker with its history cached", conv, turn)
			assert.GreaterOrEqual(t, r.CachedTokens, 768, "conversation %d, turn %d: its 768-token history was found cached", conv, turn)
		}
	}
	drainClean(t, c)
}

// TestDynamo_BusyThresholdRefusesWithAllWorkersBusy: two small aggregated
// workers with a busy threshold one request crosses (10% of 256 blocks;
// a 512-token prompt is 32), and eight times as many concurrent clients. Requests past the threshold are refused with "all workers busy"
// and counted; no request fails any other way, and the pools drain.
func TestDynamo_BusyThresholdRefusesWithAllWorkersBusy(t *testing.T) {
	s := newStack(t)
	const ns = "dyn-busy"
	args := commonArgs()
	args["num_gpu_blocks"] = 256
	s.startWorkers(t, ns, "vllm", args, pool{role: "aggregated", n: 2})
	cfg := cluster.Config{Engine: "vllm", Router: "kv", Workers: 2,
		RouterOptions: map[string]any{"active_decode_blocks_threshold": 0.1}}
	c := s.attachWith(t, ns, cfg)

	const clients, each = 16, 4
	results := make([]cluster.Result, 0, clients*each)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				r := generate(t, c, cluster.Request{PromptTokens: 512, MaxTokens: 256})
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	n := outcomes(results)
	t.Logf("outcomes: %v", n)
	assert.Positive(t, n[cluster.OutcomeRejected], "the overload is refused")
	assert.Positive(t, n[cluster.OutcomeCompleted], "what fits completes")
	assert.Equal(t, len(results), n[cluster.OutcomeRejected]+n[cluster.OutcomeCompleted], "no other outcome: %v", n)
	for _, r := range results {
		if r.Outcome == cluster.OutcomeRejected {
			assert.True(t, strings.Contains(r.Error, "all workers busy"), "refused as busy: %q", r.Error)
		}
	}
	st := drainClean(t, c)
	assert.Equal(t, uint64(n[cluster.OutcomeRejected]), st.Rejected, "every refusal counted")
}

// TestDynamo_DisaggPrefixSticksToOnePrefill: two prefill and two decode
// workers behind the kv router. Successive turns (an 896-token history
// and a new tail) of one conversation all
// prefill on the worker that holds its history; a second conversation
// sticks to its own.
func TestDynamo_DisaggPrefixSticksToOnePrefill(t *testing.T) {
	s := newStack(t)
	const ns = "dyn-sticky"
	s.startWorkers(t, ns, "vllm", commonArgs(), pool{role: "prefill", n: 2}, pool{role: "decode", n: 2})
	c := s.attachWith(t, ns, cluster.Config{Engine: "vllm", Router: "kv", Disagg: true,
		Prefill: cluster.PoolConfig{Workers: 2}, Decode: cluster.PoolConfig{Workers: 2}})

	for conv := range 2 {
		var first string
		for turn := range 6 {
			r := generate(t, c, turnOf(conv, 1024, 896))
			require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
			if turn == 0 {
				first = r.PrefillWorker
				continue
			}
			assert.Equal(t, first, r.PrefillWorker, "conversation %d, turn %d: prefilled where its history is", conv, turn)
			assert.NotEqual(t, r.PrefillWorker, r.DecodeWorker, "handed off between two workers")
		}
	}
	drainClean(t, c)
}
