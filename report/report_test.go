package report

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// bigCluster is a cluster at the bounds of what a long run keeps: a full
// series over many workers, thousands of holds, full distributions.
func bigCluster(name string, workers int) Cluster {
	s := cluster.Series{IntervalMs: 400}
	for w := range workers {
		role := "prefill"
		if w >= workers/2 {
			role = "decode"
		}
		s.Workers = append(s.Workers, fmt.Sprintf("%s-%d", role, w))
		s.Roles = append(s.Roles, role)
	}
	for i := range 512 {
		p := cluster.SeriesPoint{AtMs: float64(i) * s.IntervalMs, Completed: uint64(i % 7), Aborted: uint64(i % 3), Rejected: uint64(i % 5), HoldAborts: uint64(i % 3), PrefillRefusals: uint64(i % 4)}
		for w := range workers {
			wp := cluster.WorkerPoint{Held: (i * (w + 1)) % 300, Active: (i * 7) % 900, Free: 1024 - (i*7)%900, Reserved: i % 40, Running: i % 8, Waiting: (i * 3) % 50}
			p.Workers = append(p.Workers, wp)
			if s.Roles[w] == "prefill" {
				p.HeldBlocks += wp.Held
			}
		}
		s.Points = append(s.Points, p)
	}
	var holds []cluster.Hold
	for i := range 3000 {
		d := float64(i%1000) + 1
		out := "transferred"
		if i%5 == 0 {
			out = "aborted"
		}
		holds = append(holds, cluster.Hold{TransferID: uint64(i + 1), RequestID: uint64(i + 1),
			PrefillWorker: s.Workers[i%(workers/2)], DecodeWorker: s.Workers[workers/2+i%(workers-workers/2)],
			StartMs: float64(i) * 60, EndMs: float64(i)*60 + d, DurationMs: d, Outcome: out})
	}
	q := make([]float64, 101)
	for i := range q {
		q[i] = float64(i * i)
	}
	c := Cluster{Name: name, Engine: "vllm", Router: "kv", Topology: "many", SpeedupRatio: 10,
		Stats:  cluster.Stats{Requests: 10000, Holds: 3000, PeakHeldBlocks: 0, NowMs: 512 * 400},
		Series: s, Holds: holds,
		TTFT:          Distribution{Label: "all", Count: 10000, Quantiles: q},
		HoldDurations: []Distribution{{Label: "aborted", Count: 600, Quantiles: q}, {Label: "transferred", Count: 2400, Quantiles: q}},
	}
	for _, w := range s.Workers {
		c.Routed = append(c.Routed, Routed{Worker: w, Requests: 5000})
	}
	c.Stats.PeakHeldBlocks = c.PeakHeldBlocks()
	return c
}

func TestWrite_LongRunStaysUnderTwoMegabytes(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, Write(&b, Report{Title: "long.js", Clusters: []Cluster{bigCluster("big", 8)}}))
	t.Logf("report: %d bytes", b.Len())
	assert.Less(t, b.Len(), 2<<20)
	html := b.String()
	assert.Equal(t, 1, strings.Count(html, `data-chart="timeline"`))
	bars := regexp.MustCompile(`The (\d+) longest holds`).FindStringSubmatch(html)
	require.Len(t, bars, 2)
	assert.Equal(t, fmt.Sprint(MaxHolds), bars[1], "the timeline keeps the longest MaxHolds holds")
}

func TestWrite_SelfContained(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, Write(&b, Report{Title: "t.js", Clusters: []Cluster{bigCluster("c", 4)},
		Summary: SummaryFrom(map[string]any{"metrics": map[string]any{}})}))
	html := b.String()
	for _, s := range []string{"<script", "<link", "<img", "@import", "url(", "src=", "href="} {
		assert.NotContains(t, html, s, "the page fetches nothing")
	}
	assert.NotContains(t, html, "<?xml", "SVGs are inlined without their XML declaration")
}

func TestWrite_EveryChartOfADisaggregatedCluster(t *testing.T) {
	t.Parallel()
	c := bigCluster("c", 4)
	var b bytes.Buffer
	require.NoError(t, Write(&b, Report{Clusters: []Cluster{c}}))
	html := b.String()
	for _, kind := range []string{"held", "blocks", "queue", "reserved", "outcomes", "ttft", "pin", "timeline", "routed"} {
		assert.Regexp(t, `<figure class="chart `+kind+`" data-chart="`+kind+`" data-points="[1-9]`, html)
	}
	assert.Contains(t, html, fmt.Sprintf(`data-peak-held-blocks="%d"`, c.Stats.PeakHeldBlocks))
	assert.Equal(t, strings.Count(html, "<figure"), strings.Count(html, "<svg"), "one SVG per figure")
}

func TestWrite_EmptyClusterDrawsNoEmptyChart(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, Write(&b, Report{Clusters: []Cluster{{Name: "idle", SpeedupRatio: 10}}}))
	assert.NotContains(t, b.String(), "<figure", "nothing happened, so nothing is drawn")
	assert.Contains(t, b.String(), `data-cluster="idle"`)
}

func TestHarnessFigures_ThresholdsAndChecks(t *testing.T) {
	t.Parallel()
	data := map[string]any{
		"state": map[string]any{"testRunDurationMs": 3000.0},
		"metrics": map[string]any{
			"iterations": map[string]any{"type": "counter", "contains": "default", "values": map[string]any{"count": 30.0, "rate": 10.0}},
			"mocker_ttft{outcome:completed}": map[string]any{"type": "trend", "contains": "time",
				"values":     map[string]any{"p(95)": 12.5},
				"thresholds": map[string]any{"p(95)<10": map[string]any{"ok": false, "observed": 12.5}}},
			"checks": map[string]any{"type": "rate", "contains": "default", "values": map[string]any{"passes": 3.0, "fails": 1.0, "rate": 0.75},
				"thresholds": map[string]any{"rate>0.5": map[string]any{"ok": true, "observed": 0.75}}},
		},
		"root_group": map[string]any{"checks": []any{}, "groups": []any{
			map[string]any{"checks": []any{map[string]any{"path": "::g::ok", "passes": 3.0, "fails": 1.0}}, "groups": []any{}},
		}},
	}
	hv := harnessFigures(SummaryFrom(data))
	assert.Equal(t, []thresholdView{
		{Metric: "checks", Source: "rate>0.5", Observed: "0.75", OK: true},
		{Metric: "mocker_ttft{outcome:completed}", Source: "p(95)<10", Observed: "12.50ms", OK: false},
	}, hv.Thresholds)
	assert.Equal(t, []SummaryCheck{{Path: "g::ok", Passes: 3, Fails: 1}}, hv.Checks)
	assert.Contains(t, hv.Figures, [2]string{"iterations", "30 (10/s of script time)"})
}

func TestMergePoints_KeepsEveryCount(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 7, 100, 101, 511, 512} {
		s := bigCluster("c", 2).Series
		s.Points = s.Points[:n]
		groups, k := mergePoints(&s, outcomeBars)
		assert.LessOrEqual(t, len(groups), outcomeBars)
		var want, got cluster.SeriesPoint
		for _, p := range s.Points {
			want.Completed += p.Completed
			want.Aborted += p.Aborted
			want.Rejected += p.Rejected
			want.HoldAborts += p.HoldAborts
			want.PrefillRefusals += p.PrefillRefusals
		}
		for _, g := range groups {
			got.Completed += g.Completed
			got.Aborted += g.Aborted
			got.Rejected += g.Rejected
			got.HoldAborts += g.HoldAborts
			got.PrefillRefusals += g.PrefillRefusals
		}
		assert.Equal(t, want, got, "%d points", n)
		assert.Equal(t, (n+outcomeBars-1)/outcomeBars, k)
	}
}

func TestWrite_AggregatedClusterHasNoHandoffCharts(t *testing.T) {
	t.Parallel()
	c := bigCluster("agg", 2)
	for i := range c.Series.Roles {
		c.Series.Roles[i] = "aggregated"
	}
	c.Holds, c.HoldDurations = nil, nil
	var b bytes.Buffer
	require.NoError(t, Write(&b, Report{Clusters: []Cluster{c}}))
	html := b.String()
	for _, kind := range []string{"held", "reserved", "timeline", "pin"} {
		assert.NotContains(t, html, `data-chart="`+kind+`"`, "an aggregated worker holds and reserves nothing")
	}
	for _, kind := range []string{"blocks", "queue", "outcomes", "ttft", "routed"} {
		assert.Contains(t, html, `data-chart="`+kind+`"`)
	}
}
