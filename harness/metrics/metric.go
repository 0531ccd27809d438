package metrics

import (
	"fmt"
	"sort"
	"sync"
)

// MetricType is the kind of aggregation a metric gets, as in k6.
type MetricType int

const (
	// Counter sums its values; thresholds may use count and rate (per second).
	Counter MetricType = iota + 1
	// Gauge keeps the last value plus min and max; thresholds may use value.
	Gauge
	// Rate counts the fraction of non-zero values; thresholds may use rate.
	Rate
	// Trend keeps a distribution; thresholds may use avg, min, max, med, p(N).
	Trend
)

// String returns k6's lowercase name ("counter", "gauge", "rate", "trend").
func (t MetricType) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Rate:
		return "rate"
	case Trend:
		return "trend"
	}
	return fmt.Sprintf("MetricType(%d)", int(t))
}

// ParseMetricType is the inverse of MetricType.String.
func ParseMetricType(s string) (MetricType, error) {
	for _, t := range []MetricType{Counter, Gauge, Rate, Trend} {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown metric type %q: want counter, gauge, rate or trend", s)
}

// MarshalText encodes the type as its k6 name, so JSON shows "trend", not 4.
func (t MetricType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// ValueType says what a metric's values are; it only changes formatting.
type ValueType int

const (
	// Default values are plain numbers.
	Default ValueType = iota
	// Time values are durations in milliseconds.
	Time
	// Data values are byte counts.
	Data
)

// String returns k6's lowercase name ("default", "time", "data").
func (v ValueType) String() string {
	switch v {
	case Default:
		return "default"
	case Time:
		return "time"
	case Data:
		return "data"
	}
	return fmt.Sprintf("ValueType(%d)", int(v))
}

// MarshalText encodes the value type as its k6 name.
func (v ValueType) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// Metric is a registered metric. Samples point at it; the Collector that
// aggregates them finds its sink through the metric's registry slot, so
// adding a sample costs no map lookup.
type Metric struct {
	Name     string
	Type     MetricType
	Contains ValueType

	reg *Registry
	id  int
}

// Registry holds the metrics of one test run. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	byName  map[string]*Metric
	ordered []*Metric // by id
}

// NewRegistry returns an empty registry. Built-in metrics are registered by
// the runner like any custom metric.
func NewRegistry() *Registry {
	return &Registry{byName: make(map[string]*Metric)}
}

// ValidateName reports whether name is a valid metric name, by k6's rule
// ^[a-zA-Z_][a-zA-Z0-9_]{1,128}$: ASCII letters, digits and underscores,
// 2 to 129 characters, not starting with a digit.
func ValidateName(name string) error {
	if len(name) < 2 || len(name) > 129 {
		return fmt.Errorf("invalid metric name %q: must be 2 to 129 characters long", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9':
			if i == 0 {
				return fmt.Errorf("invalid metric name %q: must not start with a digit", name)
			}
		default:
			return fmt.Errorf("invalid metric name %q: only ASCII letters, digits and underscores are allowed", name)
		}
	}
	return nil
}

// Register returns the metric called name, creating it if needed. Declaring
// the same name again with the same type and value type returns the existing
// metric (scripts re-run their init code once per VU); a different type or
// value type is an error, as is an invalid name.
func (r *Registry) Register(name string, t MetricType, vt ValueType) (*Metric, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if t < Counter || t > Trend {
		return nil, fmt.Errorf("register metric %q: invalid metric type %d", name, int(t))
	}
	if vt < Default || vt > Data {
		return nil, fmt.Errorf("register metric %q: invalid value type %d", name, int(vt))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.byName[name]; ok {
		if m.Type != t || m.Contains != vt {
			return nil, fmt.Errorf("metric %q is already registered as a %s of %s values; cannot redeclare it as a %s of %s values",
				name, m.Type, m.Contains, t, vt)
		}
		return m, nil
	}
	m := &Metric{Name: name, Type: t, Contains: vt, reg: r, id: len(r.ordered)}
	r.byName[name] = m
	r.ordered = append(r.ordered, m)
	return m, nil
}

// MustRegister is Register for metrics whose declaration is fixed in code
// (built-ins); it panics on error.
func (r *Registry) MustRegister(name string, t MetricType, vt ValueType) *Metric {
	m, err := r.Register(name, t, vt)
	if err != nil {
		panic(err)
	}
	return m
}

// Get returns the metric called name.
func (r *Registry) Get(name string) (*Metric, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.byName[name]
	return m, ok
}

// All returns every registered metric, sorted by name.
func (r *Registry) All() []*Metric {
	r.mu.RLock()
	out := make([]*Metric, len(r.ordered))
	copy(out, r.ordered)
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// names returns every registered name (unsorted), for suggestions.
func (r *Registry) names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.ordered))
	for _, m := range r.ordered {
		out = append(out, m.Name)
	}
	return out
}
