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
	// time (less the 20 modeled ms a paced loop may run ahead, paceSlack,
	// and whatever a starved host's loop had fallen behind: so a fifth of
	// it, ten times what held allows, and still far from held's zero).
	assert.Greater(t, loop(false), 9*10.0, "not held: the host's think time is modeled time")
}
