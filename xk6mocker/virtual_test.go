package xk6mocker

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
)

// TestVirtual_VUsBlockedEveryWayAtOnce: VUs in sleep, in generate, awaiting
// generateAsync, in cluster.sleep and waiting for arrival-rate starts, all
// at once on the virtual clock: the run ends, every scenario does exactly
// its planned iterations (the thresholds say so), and a second run writes
// the same summary byte for byte.
func TestVirtual_VUsBlockedEveryWayAtOnce(t *testing.T) {
	var exports [2][]byte
	for i := range exports {
		path := filepath.Join(t.TempDir(), "summary.json")
		res := runScriptWith(t, "virtual_mix.js", nil, func(c *harness.Config) {
			c.Clock = harness.ClockVirtual
			c.SummaryExport = path
		})
		require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
		require.Len(t, res.clusters, 1)
		st := res.clusters[0].stats
		assert.Positive(t, st.Holds)
		assert.Equal(t, st.Requests, st.Completed+st.Aborted+st.Rejected+st.Errored)
		var err error
		exports[i], err = os.ReadFile(path)
		require.NoError(t, err)
	}
	assert.Equal(t, string(exports[0]), string(exports[1]))
}

// TestVirtual_RefusesTheDistributedTransport: workers in other processes
// run on the wall clock, so a cluster with a transport is refused on the
// virtual clock, with the option named and exit code 104.
func TestVirtual_RefusesTheDistributedTransport(t *testing.T) {
	r := &run{clusters: map[string]*entry{}}
	cfg := cluster.Config{Transport: &cluster.TransportConfig{}}
	_, err := r.cluster(cfg, harness.NewVirtualClock(time.Time{}))
	var exit *harness.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, harness.ExitInvalidConfig, exit.Code)
	assert.Contains(t, err.Error(), "--clock virtual")
	assert.Contains(t, err.Error(), "transport")
}

func TestVirtual_TransportScriptExits104(t *testing.T) {
	res := runScriptWith(t, "virtual_transport.js", nil, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
	assert.Equal(t, harness.ExitInvalidConfig, res.code, "stderr: %s", res.stderr)
	assert.Contains(t, res.err.Error(), "--clock virtual")
}

// TestVirtual_FailedIterationCancelsWhatItLeftInFlight: a ramping-vus
// iteration that throws with a generateAsync request still in flight ends
// its context, and with it the request, however long its VU stays active:
// no request completes after the iteration that made it.
func TestVirtual_FailedIterationCancelsWhatItLeftInFlight(t *testing.T) {
	res := runScriptWith(t, "abandoned.js", nil, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
	require.Len(t, res.clusters, 1, "stderr: %s\n%s", res.stderr, res.stdout)
	st := res.clusters[0].stats
	assert.Positive(t, st.Requests)
	assert.Zero(t, st.Completed)
	assert.Positive(t, st.Errored)
}

// TestVirtual_StoppedFromOutsideEndsRequestsInFlight: a Go caller that
// cancels harness.Run's context while a request far longer than the test
// is in flight on a stepped cluster ends it at once (outcome "error"),
// on the paced and on the virtual clock, and the run ends as interrupted.
func TestVirtual_StoppedFromOutsideEndsRequestsInFlight(t *testing.T) {
	for _, tc := range []struct {
		mode harness.ClockMode
		// Tokens enough for the request to last well over a second of
		// the host's time: the paced clock decodes about 1,600 a
		// second, the virtual one hundreds of thousands.
		maxTokens string
	}{{harness.ClockPaced, "30000"}, {harness.ClockVirtual, "1000000"}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var seen atomic.Bool
			go func() {
				defer cancel()
				for deadline := time.Now().Add(20 * time.Second); ctx.Err() == nil && time.Now().Before(deadline); {
					if requestInFlight() {
						seen.Store(true)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			res := runScriptCtx(t, ctx, "stopped_outside.js", map[string]string{"MAX_TOKENS": tc.maxTokens},
				func(c *harness.Config) { c.Clock = tc.mode })
			require.True(t, seen.Load(), "the request was in flight when the run was stopped")
			// Stopped, not waited for: the request never completed (on a
			// busy host too, where a wall-clock bound would not hold).
			assert.Equal(t, harness.ExitExternalAbort, res.code, "stderr: %s", res.stderr)
			require.Len(t, res.clusters, 1, "stderr: %s\n%s", res.stderr, res.stdout)
			st := res.clusters[0].stats
			assert.Equal(t, uint64(1), st.Requests)
			assert.Equal(t, uint64(1), st.Errored, "%+v", st)
			assert.Zero(t, st.Completed)
		})
	}
}

// requestInFlight reports whether a cluster of a run in progress has a
// request in flight.
func requestInFlight() bool {
	runsMu.Lock()
	list := make([]*run, 0, len(runs))
	for _, r := range runs {
		list = append(list, r)
	}
	runsMu.Unlock()
	for _, r := range list {
		r.mu.Lock()
		entries := r.sortedEntries()
		r.mu.Unlock()
		for _, e := range entries {
			if e.c.Stats().InFlight > 0 {
				return true
			}
		}
	}
	return false
}
