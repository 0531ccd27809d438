package serve

import (
	"fmt"
	"net/http"
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
// may run an event (cluster's own grain; see its loop).
const paceSlack = 2 * time.Millisecond

// TestVegeta_FixedRateAllServedNoSoonerThanModeled: vegeta attacks at a
// fixed rate for a few seconds; every answer is 200 with exactly the
// tokens asked, and no answer comes sooner than the model's latency at
// the speedup allows, less the pacing grain and whatever the loop had
// fallen behind (it may catch up during a request). How much later answers
// come is the host's business, measured by BenchmarkServeLatency.
func TestVegeta_FixedRateAllServedNoSoonerThanModeled(t *testing.T) {
	t.Parallel()
	const speedup = 2.0
	s, ts := startServer(t, cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": speedup}}, Options{})
	prompt := "[" + strings.Repeat("11,", 127) + "11]"
	tr := vegeta.NewStaticTargeter(vegeta.Target{
		Method: http.MethodPost,
		URL:    ts.URL + "/v1/completions",
		Body:   []byte(`{"model": "mocker", "prompt": ` + prompt + `, "max_tokens": 1}`),
		Header: http.Header{"Content-Type": []string{"application/json"}},
	})
	atk := vegeta.NewAttacker(vegeta.Client(client(ts)))
	var m vegeta.Metrics
	n := 0
	for res := range atk.Attack(tr, vegeta.Rate{Freq: 40, Per: time.Second}, 3*time.Second, "serve") {
		m.Add(res)
		n++
		if !assert.Equal(t, 200, int(res.Code), "%s %s", res.Error, res.Body) {
			continue
		}
		ttft, err := strconv.ParseFloat(res.Headers.Get(HeaderTTFT), 64)
		require.NoError(t, err, "the model's TTFT header")
		e2e, err := strconv.ParseFloat(res.Headers.Get(HeaderE2E), 64)
		require.NoError(t, err)
		assert.Equal(t, ttft, e2e, "one token: its TTFT is its latency")
		_, peak := s.Cluster().ClockLag()
		floor := time.Duration(ttft/speedup*float64(time.Millisecond)) - paceSlack - peak
		assert.GreaterOrEqual(t, res.Latency, floor, "wall latency %v, modeled TTFT %.3f ms at speedup %v", res.Latency, ttft, speedup)
	}
	m.Close()
	require.GreaterOrEqual(t, n, 100, "vegeta's requests")
	assert.Equal(t, 1.0, m.Success, fmt.Sprintf("status codes %v, errors %v", m.StatusCodes, m.Errors))
}
