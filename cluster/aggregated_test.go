package cluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew_ZeroConfigRuns(t *testing.T) {
	c := start(t, Config{})
	cfg := c.Config()
	assert.Equal(t, "default", cfg.Name)
	assert.Equal(t, "vllm", cfg.Engine)
	assert.Equal(t, "round-robin", cfg.Router)
	assert.False(t, cfg.Disagg)

	res := c.Generate(context.Background(), Request{PromptTokens: 32})
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	assert.Equal(t, DefaultMaxTokens, res.OutputTokens)

	s := drainAndCheck(t, c)
	require.Len(t, s.Workers, 2)
	assert.Equal(t, "worker-0", s.Workers[0].Name)
	assert.Equal(t, "worker-1", s.Workers[1].Name)
	for _, w := range s.Workers {
		assert.Equal(t, DefaultNumGPUBlocks, w.TotalBlocks)
	}
}

func TestAggregated_EveryRequestCompletes(t *testing.T) {
	c := start(t, Config{Workers: 3, Args: map[string]any{"speedup_ratio": 100}})
	const n = 24
	results := runAll(c, repeat(Request{PromptTokens: 100, MaxTokens: 8}, n))
	workers := map[string]int{}
	for _, r := range results {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Empty(t, r.Error)
		assert.Equal(t, 8, r.OutputTokens)
		assert.Greater(t, r.TTFTMs, 0.0)
		assert.LessOrEqual(t, r.TTFTMs, r.E2EMs)
		assert.Greater(t, r.ITLMs, 0.0)
		assert.Equal(t, r.PrefillWorker, r.DecodeWorker)
		assert.Zero(t, r.TransferID)
		assert.False(t, r.HoldStarted)
		assert.Zero(t, r.HoldMs)
		workers[r.PrefillWorker]++
	}
	assert.Len(t, workers, 3, "round-robin spreads over every worker")
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(n), s.Requests)
	assert.Equal(t, uint64(n), s.Completed)
	assert.Zero(t, s.Holds)
}

func TestAggregated_EngineRejectionNamesReason(t *testing.T) {
	c := start(t, Config{Workers: 1, Args: map[string]any{"num_gpu_blocks": 8, "speedup_ratio": 100}})
	res := c.Generate(context.Background(), Request{PromptTokens: 16 * 20})
	assert.Equal(t, OutcomeRejected, res.Outcome)
	assert.NotEmpty(t, res.Error)
	assert.False(t, res.PrefillRejected)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.Rejected)
}

func TestGenerate_BadInputNamesField(t *testing.T) {
	c := start(t, Config{Workers: 1})
	cases := []struct {
		req   Request
		field string
	}{
		{Request{}, "prompt_tokens"},
		{Request{PromptTokens: -3}, "prompt_tokens"},
		{Request{PromptTokens: 10, PrefixTokens: 11, Prefix: "p"}, "prefix_tokens"},
		{Request{PromptTokens: 10, PrefixTokens: -1}, "prefix_tokens"},
		{Request{PromptTokens: 10, MaxTokens: -1}, "max_tokens"},
	}
	for _, tc := range cases {
		res := c.Generate(context.Background(), tc.req)
		assert.Equal(t, OutcomeError, res.Outcome, "%+v", tc.req)
		assert.Contains(t, res.Error, tc.field+":", "%+v", tc.req)
	}
	res := c.Generate(context.Background(), Request{Tokens: []uint32{1, 2, 3}, MaxTokens: 2})
	assert.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	drainAndCheck(t, c)
}

func TestKVRouter_PrefixRepeatsHitCache(t *testing.T) {
	c := start(t, Config{Router: "kv", Workers: 3, Args: map[string]any{"speedup_ratio": 100}})
	req := Request{PromptTokens: 160, PrefixTokens: 128, Prefix: "system-prompt-a", MaxTokens: 2}
	first := c.Generate(context.Background(), req)
	require.Equal(t, OutcomeCompleted, first.Outcome, first.Error)
	assert.Zero(t, first.CachedTokens)
	for range 4 {
		r := c.Generate(context.Background(), req)
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, first.PrefillWorker, r.PrefillWorker, "kv routing follows the cached prefix")
		assert.GreaterOrEqual(t, r.CachedTokens, 128)
		assert.Less(t, r.CachedTokens, 160, "the suffix is random per request")
	}
	other := c.Generate(context.Background(), Request{PromptTokens: 160, PrefixTokens: 128, Prefix: "system-prompt-b", MaxTokens: 2})
	require.Equal(t, OutcomeCompleted, other.Outcome, other.Error)
	assert.Zero(t, other.CachedTokens, "another prefix shares nothing")
	drainAndCheck(t, c)
}

func TestPromptTokens_PrefixSharedRestRandom(t *testing.T) {
	a := promptTokens(Request{PromptTokens: 64, PrefixTokens: 32, Prefix: "x"}, 1, 1)
	b := promptTokens(Request{PromptTokens: 64, PrefixTokens: 32, Prefix: "x"}, 1, 2)
	other := promptTokens(Request{PromptTokens: 64, PrefixTokens: 32, Prefix: "y"}, 1, 1)
	assert.Equal(t, a[:32], b[:32])
	assert.NotEqual(t, a[32:], b[32:])
	assert.NotEqual(t, a[:32], other[:32])
	assert.Equal(t, a, promptTokens(Request{PromptTokens: 64, PrefixTokens: 32, Prefix: "x"}, 1, 1), "seeded")
}

func TestAggregated_BusyWorkersRefuse(t *testing.T) {
	c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 100, "num_gpu_blocks": 64},
		RouterOptions: map[string]any{"busy_threshold": 0.1}})
	first := make(chan Result, 1)
	// 8 blocks in flight are over 10% of 64: the router's own prediction
	// marks the worker busy at once.
	go func() { first <- c.Generate(context.Background(), Request{PromptTokens: 128, MaxTokens: 2000}) }()
	waitFor(t, "the first request to be routed", func() bool { return c.Stats().Requests == 1 && c.router.InFlight() == 1 })
	r := c.Generate(context.Background(), Request{PromptTokens: 16})
	assert.Equal(t, OutcomeRejected, r.Outcome)
	assert.Equal(t, "all workers busy", r.Error)
	assert.True(t, r.PrefillRejected)
	require.Equal(t, OutcomeCompleted, (<-first).Outcome)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.PrefillRejections)
}

func TestDrain_ReportsWhatIsBusy(t *testing.T) {
	c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1}})
	done := make(chan Result, 1)
	go func() { done <- c.Generate(context.Background(), Request{PromptTokens: 16, MaxTokens: 100000}) }()
	waitFor(t, "the request to run", func() bool { return c.Stats().Workers[0].Running == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Drain(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 requests in flight")
	require.NoError(t, c.Close())
	assert.Equal(t, errClosed, (<-done).Error)
}
