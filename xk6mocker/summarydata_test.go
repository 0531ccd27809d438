package xk6mocker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
)

// exportRun is a run of a testdata script with --summary-export.
type exportRun struct {
	stdout string
	export map[string]json.RawMessage
	stats  map[string]cluster.Stats // by cluster name, as the run closed them
}

func runWithExport(t *testing.T, name string, env map[string]string) exportRun {
	t.Helper()
	hookMu.Lock()
	defer hookMu.Unlock()
	stats := map[string]cluster.Stats{}
	beforeClose = func(name string, c *cluster.Cluster) { stats[name] = c.Stats() }
	defer func() { beforeClose = nil }()
	path := filepath.Join(t.TempDir(), "summary.json")
	var stdout, stderr bytes.Buffer
	err := harness.Run(context.Background(), harness.Config{
		Script: filepath.Join("testdata", name), Env: env, SummaryExport: path,
		Quiet: true, NoColor: true, Stdout: &stdout, Stderr: &stderr,
	})
	closing.Wait()
	require.NoError(t, err, "stderr: %s", stderr.String())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var export map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &export))
	return exportRun{stdout: stdout.String(), export: export, stats: stats}
}

// wantSummary checks a cluster's summary data against its cluster's own
// counters, read as the run closed it (after teardown's drain, so nothing
// changed since the summary).
func wantSummary(t *testing.T, name string, got ClusterSummary, st cluster.Stats) {
	t.Helper()
	assert.Equalf(t, "vllm", got.Engine, "%s: engine", name)
	assert.Equalf(t, "round-robin", got.Router, "%s: router", name)
	assert.Equalf(t, "2 prefill / 1 decode", got.Topology, "%s: topology", name)
	assert.Equalf(t, []uint64{st.Requests, st.Completed, st.Aborted, st.Rejected, st.Errored},
		[]uint64{got.Requests.Total, got.Requests.Completed, got.Requests.Aborted, got.Requests.Rejected, got.Requests.Error},
		"%s: requests by outcome", name)
	assert.Zerof(t, got.Requests.OutsideIterations, "%s: every request ended inside an iteration", name)
	assert.Equalf(t, []uint64{st.Holds, st.HoldsReleased, st.HoldsAborted, 0},
		[]uint64{got.Holds.Started, got.Holds.Released, got.Holds.Aborted, got.Holds.Held}, "%s: holds", name)
	assert.Equalf(t, st.PeakHeldBlocks, got.PeakHeldBlocks, "%s: peak held blocks", name)
	assert.Equalf(t, st.PrefillRejections, got.PrefillRefusals, "%s: prefill refusals", name)
	require.NotNilf(t, got.HoldDurationMs, "%s: holds ended, so they have durations", name)
	d := got.HoldDurationMs
	assert.Equalf(t, st.HoldsReleased+st.HoldsAborted, d.Count, "%s: one duration per ended hold", name)
	assert.Truef(t, d.P50 <= d.P90 && d.P90 <= d.P99 && d.P99 <= d.Max, "%s: percentiles in order: %+v", name, d)
	assert.InDeltaf(t, st.HoldMsMax, d.Max, st.HoldMsMax/100+1e-9, "%s: max hold duration, within the histogram's 1%%", name)
	require.NotEmptyf(t, got.LongestHolds, "%s: longest holds", name)
	assert.LessOrEqual(t, len(got.LongestHolds), longestShown)
	assert.Truef(t, sort.SliceIsSorted(got.LongestHolds, func(i, j int) bool {
		return got.LongestHolds[i].DurationMs > got.LongestHolds[j].DurationMs
	}), "%s: longest first", name)
	for _, h := range got.LongestHolds {
		assert.Containsf(t, []string{"transferred", "aborted"}, h.Outcome, "%s: only ended holds", name)
		assert.Positivef(t, h.TransferID, "%s: transfer id", name)
	}
}

func TestSummaryData_HandleSummaryAndExportHaveTheMockerSection(t *testing.T) {
	res := runWithExport(t, "summary_data.js", nil)
	var fromScript struct {
		Mocker SummaryData `json:"mocker"`
		Keys   []string    `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &fromScript), "handleSummary printed %q", res.stdout)
	assert.Equal(t, []string{"metrics", "mocker", "options", "root_group", "state"}, fromScript.Keys, "k6's keys plus mocker")
	require.Len(t, res.stats, 2)
	require.Len(t, fromScript.Mocker.Clusters, 2, "one entry per cluster of the run")
	for name, st := range res.stats {
		got, ok := fromScript.Mocker.Clusters[name]
		require.Truef(t, ok, "cluster %q in handleSummary's data", name)
		wantSummary(t, name, got, st)
	}

	keys := make([]string, 0, len(res.export))
	for k := range res.export {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	assert.Equal(t, []string{"metrics", "mocker", "root_group"}, keys, "the export keeps k6's legacy shape and adds mocker")
	var exported SummaryData
	require.NoError(t, json.Unmarshal(res.export["mocker"], &exported))
	assertSameFigures(t, fromScript.Mocker, exported)
}

// assertSameFigures compares two summaries field by field, numbers to 12
// significant digits: handleSummary's copy went through JavaScript, whose
// number printing may spend a 17th digit that reads back one ulp away.
func assertSameFigures(t *testing.T, want, got SummaryData) {
	t.Helper()
	norm := func(v SummaryData) any {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var out any
		require.NoError(t, json.Unmarshal(b, &out))
		return roundFloats(out)
	}
	assert.Equal(t, norm(want), norm(got), "the export and handleSummary carry the same figures")
}

func roundFloats(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = roundFloats(e)
		}
	case []any:
		for i, e := range x {
			x[i] = roundFloats(e)
		}
	case float64:
		s := strconv.FormatFloat(x, 'g', 12, 64)
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	return v
}

// TestSummaryData_TheTextSectionShowsTheSameFigures reads the KV HANDOFF
// section of the text summary back and compares it with the export's data
// of the same run: both render one ClusterSummary.
func TestSummaryData_TheTextSectionShowsTheSameFigures(t *testing.T) {
	res := runWithExport(t, "metrics.js", map[string]string{"ITERATIONS": "18"})
	var data SummaryData
	require.NoError(t, json.Unmarshal(res.export["mocker"], &data))
	got, ok := data.Clusters["metrics"]
	require.True(t, ok, "the export has the run's cluster: %s", res.export["mocker"])
	wantSummary(t, "metrics", got, res.stats["metrics"])
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	for _, want := range []string{
		`requests\.+: ` + u(got.Requests.Total) + ` \(completed ` + u(got.Requests.Completed) + `, aborted ` + u(got.Requests.Aborted) + `, rejected ` + u(got.Requests.Rejected) + `, error ` + u(got.Requests.Error) + `\)`,
		`holds started\.+: ` + u(got.Holds.Started) + `\n`,
		`released\.+: ` + u(got.Holds.Released) + ` \(transferred\)\n`,
		`aborted\.+: ` + u(got.Holds.Aborted) + ` \(abort or session deadline\)\n`,
		`hold duration\.+: avg=` + regexp.QuoteMeta(ms(got.HoldDurationMs.Avg)) + ` p\(50\)=` + regexp.QuoteMeta(ms(got.HoldDurationMs.P50)) +
			` p\(90\)=` + regexp.QuoteMeta(ms(got.HoldDurationMs.P90)) + ` p\(99\)=` + regexp.QuoteMeta(ms(got.HoldDurationMs.P99)) +
			` max=` + regexp.QuoteMeta(ms(got.HoldDurationMs.Max)) + `\n`,
		`peak held blocks\.+: ` + strconv.Itoa(got.PeakHeldBlocks) + `\n`,
		`prefill refusals\.+: ` + u(got.PrefillRefusals) + `\n`,
		`→ \S+ +` + regexp.QuoteMeta(ms(got.LongestHolds[0].DurationMs)) + ` +` + got.LongestHolds[0].Outcome + ` +transfer ` + u(got.LongestHolds[0].TransferID) + `\n`,
	} {
		assert.Regexp(t, want, res.stdout)
	}
}

func TestLagWarning_OnlyPastATenthOfTheRun(t *testing.T) {
	for _, tc := range []struct {
		lag  cluster.LagReport
		warn bool
	}{
		{cluster.LagReport{PeakMs: 0, RunMs: 10000}, false},
		{cluster.LagReport{PeakMs: 999, RunMs: 10000}, false},
		{cluster.LagReport{PeakMs: 1001, RunMs: 10000}, true},
		{cluster.LagReport{PeakMs: 5, RunMs: 0}, false},
	} {
		got := lagWarning(tc.lag, 200, false)
		paced := lagWarning(tc.lag, 200, true)
		if !tc.warn {
			assert.Empty(t, got, "%+v", tc.lag)
			assert.Empty(t, paced, "%+v", tc.lag)
			continue
		}
		assert.Contains(t, got, "behind the wall clock", "%+v", tc.lag)
		assert.Contains(t, got, "speedup_ratio 200")
		assert.Contains(t, got, "modeled results are unaffected")
		assert.Contains(t, paced, "paced clock ran up to 1.00s behind the wall clock")
		assert.Contains(t, paced, "took longer than its script says")
	}
}
