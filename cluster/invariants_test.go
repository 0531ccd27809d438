package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// brokenCluster runs a few disaggregated requests to the end, drains and
// closes the cluster, and checks that its invariants hold: the starting
// point each case of TestCheckInvariants_ReportsEachViolation breaks one
// field of. Once closed, the workers' occupancy is their last report, which
// a case can edit like the counters.
func brokenCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := New(Config{Disagg: true, Args: map[string]any{"speedup_ratio": 100}})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			assert.NoError(t, c.Close())
		}
	})
	for _, r := range runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 4}, 3)) {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), s.Holds, "every request pinned its KV on the prefill worker")
	require.NoError(t, c.Close())
	closed = true
	require.NoError(t, c.CheckInvariants(), "the drained, closed cluster is consistent before a case breaks it")
	for _, w := range c.workers {
		require.Positive(t, w.last.TotalBlocks, "%s reported its occupancy", w.name)
	}
	return c
}

func TestCheckInvariants_ReportsEachViolation(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(c *Cluster) // runs on the closed cluster: nothing else touches it
		want  string           // "" when the state is consistent after all
	}{
		{"a pin neither released nor aborted", func(c *Cluster) { c.stats.pins++ },
			"pins 4 != released 3 + aborted 0 + cancelled 0 + open 0"},
		{"a request with no outcome and not in flight", func(c *Cluster) { c.stats.requests++ },
			"requests 4 != completed 3 + aborted 0 + rejected 0 + errored 0 + in flight 0"},
		{"a request whose outcome is counted twice", func(c *Cluster) { c.stats.aborted++ },
			"requests 3 != completed 3 + aborted 1"},
		{"first token before arrival", func(c *Cluster) { c.timings(&Result{OutputTokens: 2}, 10, 5, 20) },
			"1 requests went back in modeled time, e.g. arrival 10.000, first token 5.000, last token 20.000"},
		{"last token before first token", func(c *Cluster) { c.timings(&Result{OutputTokens: 2}, 0, 20, 15) },
			"1 requests went back in modeled time, e.g. arrival 0.000, first token 20.000, last token 15.000"},
		{"causal timings, equal instants included", func(c *Cluster) {
			c.timings(&Result{OutputTokens: 2}, 5, 5, 5)
			c.timings(&Result{OutputTokens: 2}, 0, 5, 20)
		}, ""},
		{"a hold open after drain", func(c *Cluster) {
			c.stats.pins++ // counted as started, so the pin balance holds
			c.forensic.open.Set(99, &Hold{RequestID: 99, PrefillWorker: "prefill-0"})
		}, "1 holds still open after drain"},
		{"a hold's pin ended twice", func(c *Cluster) { c.stats.holdsAborted++ },
			"pins 3 != released 3 + aborted 1 + cancelled 0 + open 0"},
		{"held blocks after drain", func(c *Cluster) { c.workers[0].last.HeldBlocks = 4 },
			"prefill-0 after drain: held 4 blocks (0 requests), reserved 0, active 0, running 0, waiting 0; want all 0"},
		{"a held request after drain", func(c *Cluster) { c.workers[0].last.HeldRequests = 1 },
			"prefill-0 after drain: held 0 blocks (1 requests), reserved 0, active 0, running 0, waiting 0; want all 0"},
		{"reserved blocks after drain", func(c *Cluster) { c.workers[1].last.ReservedBlocks = 2 },
			"decode-0 after drain: held 0 blocks (0 requests), reserved 2, active 0, running 0, waiting 0; want all 0"},
		{"active blocks after drain", func(c *Cluster) {
			w := &c.workers[1].last
			w.ActiveBlocks += 3
			w.FreeBlocks -= 3 // blocks conserved: only the drained check sees it
		}, "decode-0 after drain: held 0 blocks (0 requests), reserved 0, active 3, running 0, waiting 0; want all 0"},
		{"a request waiting after drain", func(c *Cluster) { c.workers[1].last.Waiting = 1 },
			"decode-0 after drain: held 0 blocks (0 requests), reserved 0, active 0, running 0, waiting 1; want all 0"},
		{"a request running after drain", func(c *Cluster) { c.workers[0].last.Running = 1 },
			"prefill-0 after drain: held 0 blocks (0 requests), reserved 0, active 0, running 1, waiting 0; want all 0"},
		{"a block lost", func(c *Cluster) { c.workers[0].last.FreeBlocks-- },
			"prefill-0: active 0 + inactive"},
		{"a block counted twice", func(c *Cluster) { c.workers[1].last.InactiveBlocks++ },
			"decode-0: active 0 + inactive"},
		{"a transfer with no end", func(c *Cluster) { c.stats.transfersStarted++ },
			"transfers started 4 != completed 3 + aborted 0"},
		{"in flight: the drained checks wait", func(c *Cluster) {
			c.active++
			c.stats.requests++
			c.stats.pins++
			c.forensic.open.Set(99, &Hold{RequestID: 99})
			c.workers[0].last.HeldBlocks = 4
			c.stats.transfersStarted++
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := brokenCluster(t)
			tc.spoil(c)
			err := c.CheckInvariants()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Len(t, strings.Split(err.Error(), "\n"), 1, "only the broken field is reported: %v", err)
		})
	}
}
