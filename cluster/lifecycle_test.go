package cluster

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// saturated is a disaggregated cluster whose decode worker runs one
// sequence at a time and whose holds never abort on their own.
func saturated() Config {
	return Config{
		Disagg: true,
		Args:   map[string]any{"speedup_ratio": 100},
		Decode: PoolConfig{Args: map[string]any{"max_num_seqs": 1}},
	}
}

func TestGenerate_ContextCancelReleasesEverything(t *testing.T) {
	// At speedup 1 the long request decodes for at least 150 ms of wall
	// time, so the second one is still holding when the cancel lands,
	// however busy the host is.
	cfg := saturated()
	cfg.Args = map[string]any{"speedup_ratio": 1}
	c := start(t, cfg)
	long := make(chan Result, 1)
	go func() { long <- c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 150}) }()
	waitFor(t, "the long request to hold", func() bool { return c.Stats().Holds >= 1 })

	// The second request holds KV on the prefill worker and waits for the
	// decode's only slot; cancelling it must release both sides.
	ctx, cancel := context.WithCancel(context.Background())
	stuck := make(chan Result, 1)
	go func() { stuck <- c.Generate(ctx, Request{PromptTokens: 64, MaxTokens: 10}) }()
	waitFor(t, "the second request to hold", func() bool { return c.Stats().Holds >= 2 })
	cancel()
	r := <-stuck
	assert.Equal(t, OutcomeError, r.Outcome)
	assert.Equal(t, context.Canceled.Error(), r.Error)
	assert.True(t, r.HoldStarted)

	require.Equal(t, OutcomeCompleted, (<-long).Outcome)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.Errored)
	assert.Equal(t, uint64(1), s.HoldsCancelled, "the cancelled hold ended as cancelled")
	assert.Zero(t, s.HoldsAborted, "no deadline ended it")
}

func TestGenerate_ContextCancelAggregated(t *testing.T) {
	// At speedup 1 the first request runs for about half a wall second, so
	// the wait below sees it running however busy the host is.
	c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1, "max_num_seqs": 1}})
	long := make(chan Result, 1)
	go func() { long <- c.Generate(context.Background(), Request{PromptTokens: 32, MaxTokens: 60}) }()
	waitFor(t, "the first request to run", func() bool { return c.Stats().Workers[0].Running == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := c.Generate(ctx, Request{PromptTokens: 32})
	assert.Equal(t, OutcomeError, r.Outcome)
	require.Equal(t, OutcomeCompleted, (<-long).Outcome)
	drainAndCheck(t, c)
}

func TestClose_InFlightRequestsReturn(t *testing.T) {
	c, err := New(saturated())
	require.NoError(t, err)
	const n = 5
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 10000})
		}()
	}
	waitFor(t, "every request to hold", func() bool { return c.Stats().Holds >= n })
	require.NoError(t, c.Close())
	wg.Wait()
	for _, r := range results {
		assert.Equal(t, OutcomeError, r.Outcome)
		assert.Equal(t, errClosed, r.Error)
	}
	require.NoError(t, c.Close(), "Close is idempotent")
	s := c.Stats()
	assert.Equal(t, uint64(n), s.Errored)
	assert.Zero(t, s.InFlight)
	r := c.Generate(context.Background(), Request{PromptTokens: 4})
	assert.Equal(t, errClosed, r.Error)
}
