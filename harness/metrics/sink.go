package metrics

import (
	"math"
	"sync"
	"time"
)

// sink aggregates the samples of one metric or submetric. One struct serves
// all four types so the hot path is a switch, not an interface call; the
// fields a type does not use stay zero.
type sink struct {
	mu    sync.Mutex
	typ   MetricType
	n     uint64  // samples seen
	sum   float64 // counter: total
	last  float64 // gauge
	min   float64 // gauge
	max   float64 // gauge
	trues uint64  // rate: non-zero samples
	hist  *Histogram
}

func newSink(t MetricType) *sink {
	s := &sink{typ: t}
	if t == Trend {
		s.hist = &Histogram{}
	}
	return s
}

func (s *sink) add(v float64) {
	s.mu.Lock()
	switch s.typ {
	case Counter:
		s.sum += v
	case Gauge:
		if s.n == 0 || v < s.min {
			s.min = v
		}
		if s.n == 0 || v > s.max {
			s.max = v
		}
		s.last = v
	case Rate:
		if v != 0 {
			s.trues++
		}
	case Trend:
		s.hist.Add(v)
	}
	s.n++
	s.mu.Unlock()
}

// empty reports whether the sink has no samples yet.
func (s *sink) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n == 0
}

// aggregate returns the value of one threshold aggregation. elapsed is the
// test duration so far, for a Counter's per-second rate. As in k6, a sink
// without samples aggregates to zeros (Counter count and rate, Gauge value,
// every Trend statistic), except a Rate, whose rate is undefined: the
// second result is then false.
func (s *sink) aggregate(e Expr, elapsed time.Duration) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 && s.typ == Rate {
		return 0, false
	}
	switch e.Method {
	case AggCount:
		if s.typ == Trend {
			return float64(s.n), true
		}
		return s.sum, true
	case AggRate:
		if s.typ == Counter {
			return perSecond(s.sum, elapsed), true
		}
		return float64(s.trues) / float64(s.n), true
	case AggValue:
		return s.last, true
	case AggAvg:
		return s.hist.Avg(), true
	case AggMin:
		return s.hist.Min(), true
	case AggMax:
		return s.hist.Max(), true
	case AggMed:
		return s.hist.Median(), true
	case AggPercentile:
		return s.hist.Percentile(e.Percentile), true
	}
	return math.NaN(), false
}

func perSecond(total float64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return total / elapsed.Seconds()
}

// count returns how many samples the sink has seen.
func (s *sink) count() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// values returns the summary "values" object for the sink's type. Trend keys
// follow stats (already validated); extra holds aggregations thresholds ask
// for that must appear too.
func (s *sink) values(stats []string, extra []Expr, elapsed time.Duration) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.typ {
	case Counter:
		return map[string]any{"count": s.sum, "rate": perSecond(s.sum, elapsed)}
	case Gauge:
		return map[string]any{"value": s.last, "min": s.min, "max": s.max}
	case Rate:
		r := 0.0
		if s.n > 0 {
			r = float64(s.trues) / float64(s.n)
		}
		return map[string]any{"rate": r, "passes": float64(s.trues), "fails": float64(s.n - s.trues)}
	}
	out := make(map[string]any, len(stats)+len(extra))
	for _, st := range stats {
		if v, ok := trendStat(s.hist, st); ok {
			out[st] = v
		}
	}
	for _, e := range extra {
		name := e.Aggregation()
		if _, done := out[name]; !done {
			if v, ok := trendStat(s.hist, name); ok {
				out[name] = v
			}
		}
	}
	return out
}

// trendStat computes one summaryTrendStats entry ("avg", "p(99.9)", ...).
func trendStat(h *Histogram, stat string) (float64, bool) {
	switch stat {
	case "avg":
		return h.Avg(), true
	case "min":
		return h.Min(), true
	case "max":
		return h.Max(), true
	case "med":
		return h.Median(), true
	case "count":
		return float64(h.Count()), true
	}
	if p, ok := parsePercentile(stat); ok {
		return h.Percentile(p), true
	}
	return 0, false
}
