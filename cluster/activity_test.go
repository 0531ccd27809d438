package cluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepped_ActivityDecidesWhenSettleLooksForEndedContexts: with
// SetActivity, Settle looks for requests whose context ended only when
// the count moved since its last look, or when calls were handed in (a
// call may come with its context already ended); without it, at every
// Settle.
func TestStepped_ActivityDecidesWhenSettleLooksForEndedContexts(t *testing.T) {
	t.Parallel()
	for _, hook := range []bool{false, true} {
		c, err := NewStepped(Config{Engine: "vllm", Workers: 1, Seed: 1}, func() Gate { return nil })
		require.NoError(t, err)
		var count uint64
		if hook {
			c.SetActivity(func() uint64 { return count })
		}
		// step settles the cluster's next event (or its present).
		step := func() {
			at, ok := c.Next()
			if !ok {
				at = c.Now()
			}
			c.Settle(at)
		}
		step() // the first look
		long := Request{PromptTokens: 64, MaxTokens: 1000}

		// Handed in with its context already ended: stopped as it arrives,
		// though the count stands still.
		ended, cancelEnded := context.WithCancel(context.Background())
		cancelEnded()
		var first Result
		c.Submit(ended, long, Key{Seq: 1}, func(r Result) { first = r })
		step()
		for range 5 {
			step()
		}
		assert.Equal(t, OutcomeError, first.Outcome, "hook %v: %+v", hook, first)

		// Ended once in flight: seen at the first Settle without the hook,
		// only once the count moves with it.
		ctx, cancel := context.WithCancel(context.Background())
		var second Result
		c.Submit(ctx, long, Key{Seq: 2}, func(r Result) { second = r })
		for range 5 {
			step()
		}
		cancel()
		for range 10 {
			step()
		}
		if hook {
			assert.Empty(t, second.Outcome, "nothing moved the count: not looked for yet")
			count++
			for range 10 {
				step()
			}
		}
		assert.Equal(t, OutcomeError, second.Outcome, "hook %v: %+v", hook, second)
		assert.Equal(t, "context canceled", second.Error)
		require.NoError(t, c.Close())
	}
}
