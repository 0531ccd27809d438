package xk6mocker

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/report"
)

// runForReport runs testdata/name with WithReport and the progress display
// on, and returns the reports handed over and stderr.
func runForReport(t *testing.T, name string) ([]report.Report, string) {
	t.Helper()
	hookMu.Lock()
	defer hookMu.Unlock()
	var got []report.Report
	ctx := WithReport(context.Background(), func(r report.Report) { got = append(got, r) })
	var stdout, stderr bytes.Buffer
	err := harness.Run(ctx, harness.Config{
		Script: filepath.Join("testdata", name), NoColor: true, Stdout: &stdout, Stderr: &stderr,
	})
	closing.Wait()
	require.NoError(t, err, stderr.String())
	return got, stderr.String()
}

func TestReport_HandsEveryClusterOverOnce(t *testing.T) {
	got, _ := runForReport(t, "summary_data.js") // its handleSummary replaces the text summary
	require.Len(t, got, 1, "one report per run")
	r := got[0]
	require.NotNil(t, r.Summary, "the harness's end-of-test data")
	assert.Contains(t, r.Summary.Metrics, "mocker_kv_pins", "with the plugin's metrics")
	assert.EqualValues(t, 18, r.Summary.Metrics["iterations"].Values["count"])
	require.Len(t, r.Clusters, 2)
	assert.Equal(t, "a", r.Clusters[0].Name)
	assert.Equal(t, "b", r.Clusters[1].Name)

	a := r.Clusters[0]
	assert.EqualValues(t, 18, a.Stats.Requests)
	assert.InDelta(t, 20.0, a.SpeedupRatio, 0)
	require.NotEmpty(t, a.Series.Points)
	assert.Equal(t, a.Stats.PeakHeldBlocks, a.PeakHeldBlocks(), "the series' peak is the cluster's")
	assert.NotEmpty(t, a.Holds)

	require.Len(t, a.TTFT.Quantiles, 101)
	assert.True(t, sort.Float64sAreSorted(a.TTFT.Quantiles), "percentiles do not decrease")
	assert.Positive(t, a.TTFT.Count)
	var pins uint64
	for _, d := range a.HoldDurations {
		assert.Contains(t, []string{"transferred", "aborted"}, d.Label)
		pins += d.Count
	}
	assert.Equal(t, a.Stats.HoldsReleased+a.Stats.HoldsAborted, pins, "every ended hold's duration")

	perRole := map[string]uint64{}
	for _, w := range a.Routed {
		perRole[w.Role] += w.Requests
	}
	ended := a.Stats.Completed + a.Stats.Aborted
	assert.Equal(t, ended, perRole["prefill"], "each served request routed once to a prefill worker")
	assert.Equal(t, ended, perRole["decode"], "and once to a decode worker")
}

func TestProgress_ShowsHeldBlocksAbortsAndRefusals(t *testing.T) {
	got, stderr := runForReport(t, "summary_data.js")
	require.Len(t, got, 1)
	for _, c := range got[0].Clusters {
		re := regexp.MustCompile(`(?m)^cluster ` + c.Name + `  held (\d+)/(\d+) blocks \(now/peak\)  (\d+) aborts  (\d+) refusals$`)
		m := re.FindAllStringSubmatch(stderr, -1)
		require.NotEmptyf(t, m, "no progress line for cluster %s in:\n%s", c.Name, stderr)
		last := m[len(m)-1]
		peak, _ := strconv.Atoi(last[2])
		aborts, _ := strconv.ParseUint(last[3], 10, 64)
		assert.LessOrEqual(t, peak, c.Stats.PeakHeldBlocks)
		assert.LessOrEqual(t, aborts, c.Stats.HoldsAborted)
	}
}

// TestReport_RoutedPerRank: the report counts requests per data-parallel
// rank, naming a rank beside its worker only when the worker has several.
func TestReport_RoutedPerRank(t *testing.T) {
	var o observed
	for _, r := range []cluster.Result{
		{PrefillWorker: "prefill-0", PrefillDPRank: 1, DecodeWorker: "decode-0"},
		{PrefillWorker: "prefill-0", PrefillDPRank: 1, DecodeWorker: "decode-0"},
		{PrefillWorker: "prefill-0", PrefillDPRank: 0, DecodeWorker: "decode-0"},
	} {
		o.add(r)
	}
	ws := []cluster.WorkerStats{
		{Name: "prefill-0", DPRank: 0, Role: "prefill"},
		{Name: "prefill-0", DPRank: 1, Role: "prefill"},
		{Name: "decode-0", Role: "decode"},
	}
	assert.Equal(t, []report.Routed{
		{Worker: "prefill-0 dp_rank 0", Role: "prefill", Requests: 1},
		{Worker: "prefill-0 dp_rank 1", Role: "prefill", Requests: 2},
		{Worker: "decode-0", Role: "decode", Requests: 3},
	}, routedPer(ws, o.routed))
}
