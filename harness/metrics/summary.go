package metrics

import (
	"encoding/json"
	"fmt"
	"time"
)

// DefaultTrendStats is k6's default summaryTrendStats.
var DefaultTrendStats = []string{"avg", "min", "med", "max", "p(90)", "p(95)"}

// SummaryOptions configures SummaryData and WriteTextSummary.
type SummaryOptions struct {
	// TrendStats are the Trend values to report (options.summaryTrendStats);
	// nil means DefaultTrendStats. Validate with ValidateTrendStats.
	TrendStats []string
	// TimeUnit forces the unit of time values in the text summary
	// (options.summaryTimeUnit: "s", "ms" or "us"); empty picks per value.
	TimeUnit string
	// TestRunDuration is the test's length; Counter rates divide by it.
	TestRunDuration time.Duration
	NoColor         bool
	IsStdOutTTY     bool
	IsStdErrTTY     bool
	// RootGroup is the group/check tree, in k6's root_group shape:
	// {name, path, id, groups: [...], checks: [{name, path, id, passes, fails}]}.
	// Any value that encodes to JSON works; nil gives an empty root group.
	RootGroup any
}

// ValidateTrendStats checks options.summaryTrendStats: each entry must be
// avg, min, med, max, count or p(N) with 0 ≤ N ≤ 100.
func ValidateTrendStats(stats []string) error {
	for _, s := range stats {
		switch s {
		case "avg", "min", "med", "max", "count":
			continue
		}
		if _, isP, err := parsePercentileStrict(s); !isP || err != nil {
			return fmt.Errorf("invalid summaryTrendStats entry %q: want avg, min, med, max, count or p(N) with N between 0 and 100", s)
		}
	}
	return nil
}

// ValidateTimeUnit checks options.summaryTimeUnit.
func ValidateTimeUnit(u string) error {
	switch u {
	case "", "s", "ms", "us":
		return nil
	}
	return fmt.Errorf("invalid summaryTimeUnit %q: want s, ms or us", u)
}

// SummaryData returns the handleSummary argument in k6's shape:
//
//	{root_group, options:{summaryTrendStats, summaryTimeUnit, noColor},
//	 state:{isStdOutTTY, isStdErrTTY, testRunDurationMs},
//	 metrics:{name: {type, contains, values, thresholds?:{src:{ok, observed, noSamples?}}}}}
//
// Every value is a JSON-like Go value (map[string]any, []any, string,
// float64, bool), so the map reads the same before and after a JSON round
// trip. Metrics appear when they got samples or have thresholds; each
// submetric a thresholds key names appears under that key. Thresholds are
// evaluated over TestRunDuration. A Trend's values hold TrendStats plus any
// aggregation a threshold on it uses, so a threshold's p(99) is never
// missing from the data.
func (c *Collector) SummaryData(opts SummaryOptions) map[string]any {
	stats := opts.TrendStats
	if stats == nil {
		stats = DefaultTrendStats
	}
	dur := opts.TestRunDuration
	results := c.evaluate(dur, false)
	byKey := map[string][]ThresholdResult{}
	for _, r := range results {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	exprsByKey := map[string][]Expr{}
	for _, b := range c.bound {
		for _, it := range b.entry.items {
			exprsByKey[b.entry.key] = append(exprsByKey[b.entry.key], it.expr)
		}
	}

	metrics := map[string]any{}
	for _, st := range c.allStates() {
		if !st.forced && st.sink.count() == 0 {
			continue
		}
		name := st.metric.Name
		metrics[name] = metricEntry(st.metric, st.sink, stats, exprsByKey[name], byKey[name], dur)
	}
	for _, b := range c.bound {
		if b.entry.filter.Len() == 0 {
			continue
		}
		k := b.entry.key
		metrics[k] = metricEntry(b.entry.metric, b.sink, stats, exprsByKey[k], byKey[k], dur)
	}

	statsAny := make([]any, len(stats))
	for i, s := range stats {
		statsAny[i] = s
	}
	return map[string]any{
		"root_group": normalizeRootGroup(opts.RootGroup),
		"options": map[string]any{
			"summaryTrendStats": statsAny,
			"summaryTimeUnit":   opts.TimeUnit,
			"noColor":           opts.NoColor,
		},
		"state": map[string]any{
			"isStdOutTTY":       opts.IsStdOutTTY,
			"isStdErrTTY":       opts.IsStdErrTTY,
			"testRunDurationMs": float64(dur) / float64(time.Millisecond),
		},
		"metrics": metrics,
	}
}

func metricEntry(m *Metric, s *sink, stats []string, exprs []Expr, rs []ThresholdResult, dur time.Duration) map[string]any {
	e := map[string]any{
		"type":     m.Type.String(),
		"contains": m.Contains.String(),
		"values":   s.values(stats, exprs, dur),
	}
	if len(rs) > 0 {
		th := map[string]any{}
		for _, r := range rs {
			t := map[string]any{"ok": r.OK, "observed": r.Observed}
			if r.NoSamples {
				t["noSamples"] = true
			}
			th[r.Source] = t
		}
		e["thresholds"] = th
	}
	return e
}

// emptyGroupID is k6's id for the root group: the MD5 of its empty path.
const emptyGroupID = "d41d8cd98f00b204e9800998ecf8427e"

func normalizeRootGroup(g any) any {
	empty := map[string]any{"name": "", "path": "", "id": emptyGroupID, "groups": []any{}, "checks": []any{}}
	if g == nil {
		return empty
	}
	b, err := json.Marshal(g)
	if err != nil {
		return empty
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil || out == nil {
		return empty
	}
	return out
}
