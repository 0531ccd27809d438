package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPaced_PausedTimeKeepsTheCallersThinkTimeOutOfTheModel: a closed loop
// that takes a while (wall time) between a result and its next request
// offers, with GenerateThenPause, its next request at the instant the
// last one ended; with Generate, the host's time between the two becomes
// modeled time. The cluster's modeled clock after ten requests tells
// which.
func TestPaced_PausedTimeKeepsTheCallersThinkTimeOutOfTheModel(t *testing.T) {
	const think = 5 * time.Millisecond // 50 modeled ms at speedup 10
	loop := func(held bool) (gap float64) {
		c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 10}})
		// What a pause does, not its running out: a starved host may
		// stall a 5 ms sleep past pauseMax.
		c.query(func() { c.paced.maxPause = time.Hour })
		// The first request arrives at the wall clock's modeled now.
		var first float64
		var pause Pause
		var busy float64
		for i := range 10 {
			var res Result
			if held {
				res, pause = c.GenerateThenPause(context.Background(), Request{PromptTokens: 64, MaxTokens: 4}, pause)
			} else {
				res = c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4})
			}
			require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
			if i == 0 {
				c.query(func() { first = c.v.Now() - res.E2EMs })
			}
			busy += res.E2EMs
			time.Sleep(think)
		}
		c.Resume(pause)
		var now float64
		c.query(func() { now = c.v.Now() })
		return now - first - busy
	}
	assert.Less(t, loop(true), 1.0, "held: each request arrives as the last one ends")
	// Not held, the host's 50 modeled ms between requests become modeled
	// time (less the 20 modeled ms a paced loop may run ahead, PaceSlack,
	// and whatever a starved host's loop had fallen behind: so a fifth of
	// it, ten times what held allows, and still far from held's zero).
	assert.Greater(t, loop(false), 9*10.0, "not held: the host's think time is modeled time")
}

// TestPaced_APauseRunsOutAfterMaxPause: a caller that keeps its pause
// past maxPause without news lets modeled time go on (its think time
// becomes modeled time after all), and the lost pauses are counted.
func TestPaced_APauseRunsOutAfterMaxPause(t *testing.T) {
	c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 10}})
	c.query(func() { c.paced.maxPause = 5 * time.Millisecond })
	var pause Pause
	var first, busy float64
	for i := range 5 {
		var res Result
		res, pause = c.GenerateThenPause(context.Background(), Request{PromptTokens: 64, MaxTokens: 4}, pause)
		require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
		if i == 0 {
			c.query(func() { first = c.v.Now() - res.E2EMs })
		}
		busy += res.E2EMs
		// 50 ms (500 modeled) of think: at least 45 of it past the pause.
		time.Sleep(50 * time.Millisecond)
	}
	c.Resume(pause)
	var now float64
	var lost uint64
	c.query(func() { now, lost = c.v.Now(), c.paced.lost })
	// Counted when the loop next looks (the last pause may end by
	// Resume first).
	assert.GreaterOrEqual(t, lost, uint64(4), "the pauses ran out")
	// 4 gaps of at least 450 modeled ms; a fifth of it allows for a
	// starved host's loop falling behind (as the test above).
	assert.Greater(t, now-first-busy, 4*450/5.0, "the think time past each pause is modeled time")
}
