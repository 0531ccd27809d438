package metrics

import (
	"encoding/json"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// summaryFixture feeds known values so the test can compute every expected
// number by hand.
func summaryFixture(t *testing.T) *Collector {
	t.Helper()
	reg := testRegistry(t)
	reg.MustRegister("unused_trend", Trend, Time)
	reg.MustRegister("never_seen", Counter, Default)
	ts := mustThresholds(t, reg, map[string][]Threshold{
		"http_req_duration":             ths("p(95)<200", "p(99)<300"),
		"http_req_duration{status:200}": ths("max<100"),
		"http_req_duration{scenario:b}": {},
		"checks":                        ths("rate>0.5"),
		"unused_trend":                  ths("avg<5"),
		"iterations":                    ths("count>=4"),
	})
	c := NewCollector(reg, ts)
	m := func(n string) *Metric { x, _ := reg.Get(n); return x }
	ok := NewTags(map[string]string{"status": "200"})
	bad := NewTags(map[string]string{"status": "500"})
	for i, v := range []float64{10, 20, 30, 40, 400} {
		tags := ok
		if i == 4 {
			tags = bad
		}
		c.Add(Sample{Metric: m("http_req_duration"), Tags: tags, Value: v})
	}
	c.Add(Sample{Metric: m("iterations"), Value: 1}, Sample{Metric: m("iterations"), Value: 3})
	c.Add(Sample{Metric: m("checks"), Value: 1}, Sample{Metric: m("checks"), Value: 1}, Sample{Metric: m("checks"), Value: 0})
	c.Add(Sample{Metric: m("vus"), Value: 3}, Sample{Metric: m("vus"), Value: 7}, Sample{Metric: m("vus"), Value: 5})
	c.Add(Sample{Metric: m("data_sent"), Value: 1500})
	return c
}

func TestSummaryData_Shape(t *testing.T) {
	t.Parallel()
	c := summaryFixture(t)
	root := map[string]any{"name": "", "path": "", "id": "x", "groups": []any{},
		"checks": []map[string]any{{"name": "ok", "passes": 2, "fails": 1}}}
	data := c.SummaryData(SummaryOptions{TestRunDuration: 2 * time.Second, IsStdOutTTY: true, NoColor: true, TimeUnit: "ms", RootGroup: root})

	// Decode through JSON, as handleSummary receives it.
	b, err := json.Marshal(data)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, got, data, "SummaryData holds only JSON-like values")

	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	assert.Equal(t, []string{"metrics", "options", "root_group", "state"}, keys(got))
	assert.Equal(t, map[string]any{
		"summaryTrendStats": []any{"avg", "min", "med", "max", "p(90)", "p(95)"},
		"summaryTimeUnit":   "ms",
		"noColor":           true,
	}, got["options"])
	assert.Equal(t, map[string]any{"isStdOutTTY": true, "isStdErrTTY": false, "testRunDurationMs": 2000.0}, got["state"])
	rg := got["root_group"].(map[string]any)
	assert.Equal(t, "ok", rg["checks"].([]any)[0].(map[string]any)["name"])

	metrics := got["metrics"].(map[string]any)
	assert.Equal(t, []string{
		"checks", "data_sent", "http_req_duration", "http_req_duration{scenario:b}",
		"http_req_duration{status:200}", "iterations", "unused_trend", "vus",
	}, keys(metrics), "never_seen has neither samples nor thresholds")

	entry := func(k string) map[string]any { return metrics[k].(map[string]any) }
	vals := func(k string) map[string]any { return entry(k)["values"].(map[string]any) }

	assert.Equal(t, "counter", entry("iterations")["type"])
	assert.Equal(t, "default", entry("iterations")["contains"])
	assert.Equal(t, map[string]any{"count": 4.0, "rate": 2.0}, vals("iterations"))
	assert.Equal(t, map[string]any{"ok": true, "observed": 4.0}, entry("iterations")["thresholds"].(map[string]any)["count>=4"])

	assert.Equal(t, "gauge", entry("vus")["type"])
	assert.Equal(t, map[string]any{"value": 5.0, "min": 3.0, "max": 7.0}, vals("vus"))
	assert.NotContains(t, entry("vus"), "thresholds")

	assert.Equal(t, "rate", entry("checks")["type"])
	assert.Equal(t, map[string]any{"rate": 2.0 / 3, "passes": 2.0, "fails": 1.0}, vals("checks"))

	assert.Equal(t, "data", entry("data_sent")["contains"])
	assert.Equal(t, map[string]any{"count": 1500.0, "rate": 750.0}, vals("data_sent"))

	// Trend: the default stats plus p(99), which a threshold uses.
	d := vals("http_req_duration")
	assert.Equal(t, "trend", entry("http_req_duration")["type"])
	assert.Equal(t, "time", entry("http_req_duration")["contains"])
	assert.Equal(t, []string{"avg", "max", "med", "min", "p(90)", "p(95)", "p(99)"}, keys(d))
	raw := []float64{10, 20, 30, 40, 400}
	assert.Equal(t, 100.0, d["avg"])
	assert.Equal(t, 10.0, d["min"])
	assert.Equal(t, 400.0, d["max"])
	for _, p := range []struct {
		k string
		v float64
	}{{"med", 50}, {"p(90)", 90}, {"p(95)", 95}, {"p(99)", 99}} {
		assert.InEpsilon(t, exactPercentile(raw, p.v), d[p.k], 0.008, p.k)
	}
	th := entry("http_req_duration")["thresholds"].(map[string]any)
	p95 := th["p(95)<200"].(map[string]any)
	assert.Equal(t, false, p95["ok"])
	assert.InEpsilon(t, exactPercentile(raw, 95), p95["observed"], 0.008)
	assert.NotContains(t, p95, "noSamples")

	sub := entry("http_req_duration{status:200}")
	assert.Equal(t, "trend", sub["type"])
	assert.Equal(t, 40.0, sub["values"].(map[string]any)["max"])
	assert.Equal(t, map[string]any{"ok": true, "observed": 40.0}, sub["thresholds"].(map[string]any)["max<100"])

	// A submetric named with an empty threshold list shows, with no thresholds.
	empty := entry("http_req_duration{scenario:b}")
	assert.NotContains(t, empty, "thresholds")
	assert.Equal(t, 0.0, empty["values"].(map[string]any)["avg"])

	// A trend with a threshold but no samples: zeros, judged as k6 does.
	assert.Equal(t, map[string]any{"ok": true, "observed": 0.0},
		entry("unused_trend")["thresholds"].(map[string]any)["avg<5"])
}

func TestSummaryData_CustomTrendStats(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	m := reg.MustRegister("lat", Trend, Time)
	c := NewCollector(reg, nil)
	for v := 1; v <= 1000; v++ {
		c.Add(Sample{Metric: m, Value: float64(v)})
	}
	stats := []string{"count", "p(99.9)", "p(0)"}
	require.NoError(t, ValidateTrendStats(stats))
	vals := c.SummaryData(SummaryOptions{TrendStats: stats})["metrics"].(map[string]any)["lat"].(map[string]any)["values"].(map[string]any)
	assert.Len(t, vals, 3)
	assert.Equal(t, 1000.0, vals["count"])
	assert.Equal(t, 1.0, vals["p(0)"])
	assert.InEpsilon(t, 999.001, vals["p(99.9)"], 0.008)
	assert.False(t, math.IsNaN(vals["p(99.9)"].(float64)))
}

func TestSummaryData_DefaultRootGroup(t *testing.T) {
	t.Parallel()
	c := NewCollector(NewRegistry(), nil)
	rg := c.SummaryData(SummaryOptions{})["root_group"].(map[string]any)
	assert.Equal(t, "", rg["name"])
	assert.Equal(t, emptyGroupID, rg["id"])
	assert.Equal(t, []any{}, rg["groups"])
	assert.Equal(t, []any{}, rg["checks"])
}

func TestValidateTrendStatsAndTimeUnit(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]string{nil, DefaultTrendStats, {"count"}, {"p(99.99)"}} {
		assert.NoError(t, ValidateTrendStats(ok), ok)
	}
	for _, bad := range [][]string{{"mean"}, {"p(101)"}, {"avg", "p95"}, {"rate"}} {
		assert.Error(t, ValidateTrendStats(bad), bad)
	}
	for _, ok := range []string{"", "s", "ms", "us"} {
		assert.NoError(t, ValidateTimeUnit(ok))
	}
	assert.Error(t, ValidateTimeUnit("ns"))
}
