package serve

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/kvstrand/mocker/cluster"
)

// paceSlack is how far ahead of the wall clock the cluster's paced loop
// may run an event (its pacing grain).
const paceSlack = cluster.PaceSlack

// TestVegeta_FixedRateTenSecondsMatchesTheModel: vegeta attacks at a
// fixed rate for 10 s; every answer is 200 with exactly the token asked,
// and each one's latency is the model's: the modeled TTFT the answer
// reports is what a lone request of the same prompt gets in a virtual run
// of the same cluster (most requests find the worker idle; the median
// must match), no answer comes sooner than that TTFT at the speedup allows
// (less the pacing grain and whatever the loop had fallen behind, which it
// may catch up during a request), and the median answer comes no more
// than the grain, the loop's lag and a generous allowance for HTTP later
// than it. How much later a busy host makes single answers is the host's
// business, measured by BenchmarkServeLatency, not asserted here.
func TestVegeta_FixedRateTenSecondsMatchesTheModel(t *testing.T) {
	t.Parallel()
	const speedup = 2.0
	cfg := cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": speedup}}
	s, ts := startServer(t, cfg, Options{})
	tokens := make([]uint32, 128)
	for i := range tokens {
		tokens[i] = 11
	}
	// The first request of the prompt fills the cache; the rest hit it.
	lone, err := cluster.RunVirtual(cfg, []cluster.Arrival{
		{AtMs: 0, Request: cluster.Request{Tokens: tokens, MaxTokens: 1}},
		{AtMs: 10000, Request: cluster.Request{Tokens: tokens, MaxTokens: 1}},
		{AtMs: 20000, Request: cluster.Request{Tokens: tokens, MaxTokens: 1}},
	}, cluster.VirtualOptions{})
	require.NoError(t, err)
	loneTTFT := lone.Results[2].TTFTMs
	require.Positive(t, loneTTFT)

	prompt := "[" + strings.Repeat("11,", 127) + "11]"
	tr := vegeta.NewStaticTargeter(vegeta.Target{
		Method: http.MethodPost,
		URL:    ts.URL + "/v1/completions",
		Body:   []byte(`{"model": "mocker", "prompt": ` + prompt + `, "max_tokens": 1}`),
		Header: http.Header{"Content-Type": []string{"application/json"}},
	})
	atk := vegeta.NewAttacker(vegeta.Client(client(ts)))
	// The host's own HTTP round trip, sampled through the attack: how much
	// later than modeled a busy host may answer is measured against it,
	// not assumed.
	health := sampleRoundTrips(t, ts.URL+"/health", 100*time.Millisecond)
	var m vegeta.Metrics
	var modeled []float64
	var excess []time.Duration
	// 400 hits at 40 a second: counted, not bounded by a duration, so a
	// host that delays vegeta's pacer sends them all the same.
	const hits = 400
	pacer := hitsPacer{Pacer: vegeta.Rate{Freq: 40, Per: time.Second}, n: hits}
	for res := range atk.Attack(tr, pacer, 0, "serve") {
		m.Add(res)
		if !assert.Equal(t, 200, int(res.Code), "%s %s", res.Error, res.Body) {
			continue
		}
		ttft, err := strconv.ParseFloat(res.Headers.Get(HeaderTTFT), 64)
		require.NoError(t, err, "the model's TTFT header")
		e2e, err := strconv.ParseFloat(res.Headers.Get(HeaderE2E), 64)
		require.NoError(t, err)
		assert.Equal(t, ttft, e2e, "one token: its TTFT is its latency")
		_, peak := s.Cluster().ClockLag()
		wall := time.Duration(ttft / speedup * float64(time.Millisecond))
		assert.GreaterOrEqual(t, res.Latency, wall-paceSlack-peak, "wall latency %v, modeled TTFT %.3f ms at speedup %v", res.Latency, ttft, speedup)
		modeled = append(modeled, ttft)
		excess = append(excess, res.Latency-wall)
	}
	m.Close()
	rtt := health()
	require.Len(t, modeled, hits, "vegeta's requests: 40 a second for 10 s")
	assert.Equal(t, 1.0, m.Success, fmt.Sprintf("status codes %v, errors %v", m.StatusCodes, m.Errors))
	slices.Sort(modeled)
	assert.InDelta(t, loneTTFT, modeled[len(modeled)/2], 5e-4, "the median modeled TTFT is a lone request's (the header rounds to the microsecond)")
	slices.Sort(excess)
	_, peak := s.Cluster().ClockLag()
	httpAllowance := max(50*time.Millisecond, 4*rtt)
	assert.LessOrEqual(t, excess[len(excess)/2], paceSlack+peak+httpAllowance,
		"the median answer's wall latency past the modeled TTFT / speedup (loop lag peak %v)", peak)
	t.Logf("%d requests; modeled TTFT median %.3f ms (lone %.3f); wall past modeled: median %v, p99 %v; loop lag peak %v; /health round trip median %v",
		len(modeled), modeled[len(modeled)/2], loneTTFT, excess[len(excess)/2], excess[len(excess)*99/100], peak, rtt)
}

// hitsPacer stops an attack after n hits.
type hitsPacer struct {
	vegeta.Pacer
	n uint64
}

func (p hitsPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= p.n {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}

// sampleRoundTrips GETs url every period until the returned func is
// called, which returns the median round trip.
func sampleRoundTrips(t *testing.T, url string, period time.Duration) func() time.Duration {
	t.Helper()
	done := make(chan struct{})
	out := make(chan time.Duration, 1)
	hc := &http.Client{Transport: &http.Transport{}}
	go func() {
		defer hc.CloseIdleConnections()
		var rtts []time.Duration
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				if len(rtts) == 0 {
					out <- 0
					return
				}
				slices.Sort(rtts)
				out <- rtts[len(rtts)/2]
				return
			case <-tick.C:
			}
			start := time.Now()
			resp, err := hc.Get(url)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			rtts = append(rtts, time.Since(start))
		}
	}()
	return func() time.Duration {
		close(done)
		return <-out
	}
}
