package report

import (
	"sort"
	"strings"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// Summary is the part of a run's end-of-test data (the object
// handleSummary receives) that the report shows, typed. SummaryFrom reads
// it; anything missing or of another type is left at its zero value, so a
// summary from an older or partial run still renders what it has.
type Summary struct {
	// TestRunDurationMs is state.testRunDurationMs (script time); nil when
	// absent.
	TestRunDurationMs *float64
	// Metrics are the run's metrics by name.
	Metrics map[string]SummaryMetric
	// Checks are every check of every group, depth first, their paths
	// without the root group's leading "::".
	Checks []SummaryCheck
}

// SummaryMetric is one metric's entry.
type SummaryMetric struct {
	// Contains is "time" for durations, "data" or "default".
	Contains string
	// Values are the metric's statistics by name ("count", "rate", "avg",
	// "p(95)", ...); a statistic that is not a number is left out.
	Values map[string]float64
	// Thresholds are the metric's thresholds by source expression.
	Thresholds map[string]SummaryThreshold
}

// SummaryThreshold is one threshold's verdict.
type SummaryThreshold struct {
	OK bool
	// Observed is the value the threshold was judged on; nil when absent.
	Observed *float64
	// NoSamples says the metric had no sample to judge.
	NoSamples bool
}

// SummaryCheck is one check's tally.
type SummaryCheck struct {
	Path          string
	Passes, Fails int64
}

// SummaryFrom reads the end-of-test data into a Summary; nil data gives
// nil.
func SummaryFrom(data map[string]any) *Summary {
	if data == nil {
		return nil
	}
	s := &Summary{Metrics: map[string]SummaryMetric{}}
	if d, ok := jsonval.AsFloat(asMap(data["state"])["testRunDurationMs"]); ok {
		s.TestRunDurationMs = &d
	}
	for name, v := range asMap(data["metrics"]) {
		m := asMap(v)
		sm := SummaryMetric{Values: map[string]float64{}}
		sm.Contains, _ = m["contains"].(string)
		for k, x := range asMap(m["values"]) {
			if f, ok := jsonval.AsFloat(x); ok {
				sm.Values[k] = f
			}
		}
		if ths := asMap(m["thresholds"]); len(ths) > 0 {
			sm.Thresholds = make(map[string]SummaryThreshold, len(ths))
			for src, t := range ths {
				tm := asMap(t)
				var st SummaryThreshold
				st.OK, _ = tm["ok"].(bool)
				st.NoSamples, _ = tm["noSamples"].(bool)
				if f, ok := jsonval.AsFloat(tm["observed"]); ok {
					st.Observed = &f
				}
				sm.Thresholds[src] = st
			}
		}
		s.Metrics[name] = sm
	}
	walkChecks(asMap(data["root_group"]), &s.Checks)
	return s
}

// names returns the summary's metric names, sorted.
func (s *Summary) names() []string {
	names := make([]string, 0, len(s.Metrics))
	for k := range s.Metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func walkChecks(g map[string]any, out *[]SummaryCheck) {
	if g == nil {
		return
	}
	checks, _ := g["checks"].([]any)
	for _, c := range checks {
		cm := asMap(c)
		path, _ := cm["path"].(string)
		passes, _ := jsonval.AsInt(cm["passes"])
		fails, _ := jsonval.AsInt(cm["fails"])
		*out = append(*out, SummaryCheck{Path: strings.TrimPrefix(path, "::"), Passes: passes, Fails: fails})
	}
	groups, _ := g["groups"].([]any)
	for _, sub := range groups {
		walkChecks(asMap(sub), out)
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
