package cluster

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepped_SubmitAtArrivesAtItsOwnTime: requests handed to a stepped
// cluster with SubmitAt before their time arrive at it exactly, however
// the Settles fall: the results are RunVirtual's for the same arrivals,
// bit for bit. Two at one instant keep Key order, as RunVirtual keeps
// slice order.
func TestStepped_SubmitAtArrivesAtItsOwnTime(t *testing.T) {
	t.Parallel()
	cfg := Config{Engine: "vllm", Seed: 3, Disagg: true, Prefill: PoolConfig{Workers: 1}, Decode: PoolConfig{Workers: 1}}
	arrivals := []Arrival{
		{AtMs: 0.3, Request: Request{PromptTokens: 700, MaxTokens: 12}},
		{AtMs: 1.0 / 3, Request: Request{PromptTokens: 300, MaxTokens: 40}},
		{AtMs: 17.77777777, Request: Request{PromptTokens: 900, MaxTokens: 8}},
		{AtMs: 17.77777777, Request: Request{PromptTokens: 100, MaxTokens: 20}},
		{AtMs: 250.123456789, Request: Request{PromptTokens: 1500, MaxTokens: 30}},
	}
	want, err := RunVirtual(cfg, arrivals, VirtualOptions{})
	require.NoError(t, err)

	c, err := NewStepped(cfg, func() Gate { return nil })
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	got := make([]Result, len(arrivals))
	ended := 0
	next := 0
	// Settle on a coarse grid of whole ms and at the cluster's events,
	// handing each arrival in at the last grid point before its time.
	for now := 0.0; ended < len(arrivals); {
		for next < len(arrivals) && arrivals[next].AtMs < now+1 {
			i := next
			c.SubmitAt(context.Background(), arrivals[i].Request, Key{Seq: uint64(i)}, arrivals[i].AtMs, func(r Result) {
				got[i] = r
				ended++
			})
			next++
		}
		c.Settle(now)
		at, ok := c.Next()
		if !ok || at > math.Floor(now)+1 {
			at = math.Floor(now) + 1
		}
		now = at
	}
	for i := range arrivals {
		assert.Equalf(t, want.Results[i], got[i], "arrival %d at %v", i, arrivals[i].AtMs)
	}
	assert.Equal(t, OutcomeCompleted, got[4].Outcome)

	var bad Result
	c.SubmitAt(context.Background(), Request{PromptTokens: 10}, Key{}, math.NaN(), func(r Result) { bad = r })
	assert.Equal(t, OutcomeError, bad.Outcome)
	assert.Contains(t, bad.Error, "at_ms")
}
