package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvstrand/mocker/internal/spell"
)

// AggregationMethod is the left-hand side of a threshold expression.
type AggregationMethod int

const (
	// AggCount is a Counter's total.
	AggCount AggregationMethod = iota + 1
	// AggRate is a Counter's total per second, or a Rate's non-zero fraction.
	AggRate
	// AggValue is a Gauge's last value.
	AggValue
	// AggAvg is a Trend's mean.
	AggAvg
	// AggMin is a Trend's minimum.
	AggMin
	// AggMax is a Trend's maximum.
	AggMax
	// AggMed is a Trend's median.
	AggMed
	// AggPercentile is a Trend's p(N); Expr.Percentile holds N.
	AggPercentile
)

var aggNames = map[string]AggregationMethod{
	"count": AggCount, "rate": AggRate, "value": AggValue,
	"avg": AggAvg, "min": AggMin, "max": AggMax, "med": AggMed,
}

// validAggs lists, per metric type, the aggregations thresholds may use.
var validAggs = map[MetricType][]AggregationMethod{
	Counter: {AggCount, AggRate},
	Gauge:   {AggValue},
	Rate:    {AggRate},
	Trend:   {AggAvg, AggMin, AggMax, AggMed, AggPercentile},
}

// ValidFor reports whether a threshold on a metric of type t may use m.
func (m AggregationMethod) ValidFor(t MetricType) bool {
	for _, a := range validAggs[t] {
		if a == m {
			return true
		}
	}
	return false
}

// String returns the aggregation as written, with "p(N)" for percentiles.
func (m AggregationMethod) String() string {
	if m == AggPercentile {
		return "p(N)"
	}
	for k, v := range aggNames {
		if v == m {
			return k
		}
	}
	return fmt.Sprintf("AggregationMethod(%d)", int(m))
}

// Operator is a threshold comparison.
type Operator int

const (
	// OpLess is <.
	OpLess Operator = iota + 1
	// OpLessEqual is <=.
	OpLessEqual
	// OpGreater is >.
	OpGreater
	// OpGreaterEqual is >=.
	OpGreaterEqual
	// OpEqual is == (k6 treats === the same).
	OpEqual
	// OpNotEqual is !=.
	OpNotEqual
)

// Longest first, so "<=" is not read as "<" followed by "=5".
var operators = []struct {
	text string
	op   Operator
}{
	{"===", OpEqual}, {"==", OpEqual}, {"!=", OpNotEqual},
	{"<=", OpLessEqual}, {">=", OpGreaterEqual}, {"<", OpLess}, {">", OpGreater},
}

// String returns the operator's canonical spelling.
func (o Operator) String() string {
	switch o {
	case OpLess:
		return "<"
	case OpLessEqual:
		return "<="
	case OpGreater:
		return ">"
	case OpGreaterEqual:
		return ">="
	case OpEqual:
		return "=="
	case OpNotEqual:
		return "!="
	}
	return fmt.Sprintf("Operator(%d)", int(o))
}

// Expr is one parsed threshold expression, `aggregation operator number`.
type Expr struct {
	Source     string // as written
	Method     AggregationMethod
	Percentile float64 // N of p(N), when Method is AggPercentile
	Op         Operator
	Value      float64
}

// Aggregation returns the left-hand side in canonical form ("avg", "p(99.9)").
func (e Expr) Aggregation() string {
	if e.Method == AggPercentile {
		return "p(" + strconv.FormatFloat(e.Percentile, 'f', -1, 64) + ")"
	}
	return e.Method.String()
}

// Holds reports whether observed satisfies the expression.
func (e Expr) Holds(observed float64) bool {
	switch e.Op {
	case OpLess:
		return observed < e.Value
	case OpLessEqual:
		return observed <= e.Value
	case OpGreater:
		return observed > e.Value
	case OpGreaterEqual:
		return observed >= e.Value
	case OpEqual:
		return observed == e.Value
	case OpNotEqual:
		return observed != e.Value
	}
	return false
}

const aggHelp = "want count, rate, value, avg, min, max, med or p(N)"

// ParseThresholdExpr parses k6's threshold grammar: an aggregation (count,
// rate, value, avg, min, max, med or p(N) with 0 ≤ N ≤ 100), an operator
// (<, <=, >, >=, ==, ===, !=) and a decimal number, with optional whitespace
// between them. It does not know the metric; ParseThresholds checks that the
// aggregation suits the metric's type.
func ParseThresholdExpr(src string) (Expr, error) {
	s := strings.TrimSpace(src)
	if s == "" {
		return Expr{}, errors.New("empty threshold expression; write e.g. 'p(95)<200'")
	}
	at := strings.IndexAny(s, "<>=!")
	if at < 0 {
		return Expr{}, fmt.Errorf("no comparison operator in %q; want one of <, <=, >, >=, ==, ===, !=", src)
	}
	e := Expr{Source: src}
	lhs, rest := strings.TrimSpace(s[:at]), s[at:]
	for _, o := range operators {
		if strings.HasPrefix(rest, o.text) {
			e.Op = o.op
			rest = rest[len(o.text):]
			break
		}
	}
	if e.Op == 0 {
		return Expr{}, fmt.Errorf("invalid operator in %q; want one of <, <=, >, >=, ==, ===, !=", src)
	}
	switch m, ok := aggNames[lhs]; {
	case lhs == "":
		return Expr{}, fmt.Errorf("missing aggregation before the operator in %q; %s", src, aggHelp)
	case ok:
		e.Method = m
	default:
		p, isP, err := parsePercentileStrict(lhs)
		if !isP {
			return Expr{}, fmt.Errorf("unknown aggregation %q in %q; %s", lhs, src, aggHelp)
		}
		if err != nil {
			return Expr{}, fmt.Errorf("invalid percentile %q in %q: %w", lhs, src, err)
		}
		e.Method, e.Percentile = AggPercentile, p
	}
	num := strings.TrimSpace(rest)
	if num == "" {
		return Expr{}, fmt.Errorf("missing number after operator %q in %q", e.Op, src)
	}
	v, err := parseDecimal(num)
	if err != nil {
		return Expr{}, fmt.Errorf("invalid number %q in %q: want a decimal such as 200, 0.95 or -1.5", num, src)
	}
	e.Value = v
	return e, nil
}

// parseDecimal accepts what k6 accepts (a Go float) minus the spellings that
// make no sense in a threshold: inf, nan, hex and underscores.
func parseDecimal(s string) (float64, error) {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E') {
			return 0, fmt.Errorf("unexpected character %q", c)
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a finite number")
	}
	return v, nil
}

// parsePercentileStrict reads "p(N)". isP says whether s has the p(...) shape
// at all, so the caller can tell "unknown aggregation" from "bad N".
func parsePercentileStrict(s string) (n float64, isP bool, err error) {
	if !strings.HasPrefix(s, "p(") || !strings.HasSuffix(s, ")") {
		return 0, false, nil
	}
	inner := strings.TrimSpace(s[2 : len(s)-1])
	v, err := parseDecimal(inner)
	if err != nil {
		return 0, true, errors.New("the percentile in p(N) must be a number between 0 and 100")
	}
	if v < 0 || v > 100 {
		return 0, true, fmt.Errorf("the percentile in p(N) must be between 0 and 100, got %v", v)
	}
	return v, true, nil
}

func parsePercentile(s string) (float64, bool) {
	v, isP, err := parsePercentileStrict(s)
	return v, isP && err == nil
}

// Threshold is one entry of options.thresholds: the expression source plus
// k6's abortOnFail and delayAbortEval. It decodes from JSON either as a bare
// string or as {threshold, abortOnFail, delayAbortEval}, where
// delayAbortEval is a Go duration string ("10s") or a number of
// milliseconds.
type Threshold struct {
	Source         string
	AbortOnFail    bool
	DelayAbortEval time.Duration
}

// UnmarshalJSON accepts both forms k6 accepts.
func (t *Threshold) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Threshold{Source: s}
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("threshold must be a string or an object {threshold, abortOnFail, delayAbortEval}, got %s", b)
	}
	var out Threshold
	for k, raw := range obj {
		switch k {
		case "threshold":
			if err := json.Unmarshal(raw, &out.Source); err != nil {
				return fmt.Errorf("threshold object: \"threshold\" must be a string, got %s", raw)
			}
		case "abortOnFail":
			if err := json.Unmarshal(raw, &out.AbortOnFail); err != nil {
				return fmt.Errorf("threshold object: \"abortOnFail\" must be a boolean, got %s", raw)
			}
		case "delayAbortEval":
			d, err := decodeDuration(raw)
			if err != nil {
				return fmt.Errorf("threshold object: \"delayAbortEval\": %w", err)
			}
			out.DelayAbortEval = d
		default:
			return fmt.Errorf("threshold object: unknown field %q; want threshold, abortOnFail or delayAbortEval", k)
		}
	}
	if _, ok := obj["threshold"]; !ok {
		return fmt.Errorf("threshold object %s has no \"threshold\" expression", b)
	}
	*t = out
	return nil
}

func decodeDuration(raw json.RawMessage) (time.Duration, error) {
	if string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: write e.g. \"10s\" or \"1m30s\"", s)
		}
		if d < 0 {
			return 0, fmt.Errorf("duration %q must not be negative", s)
		}
		return d, nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil || ms < 0 {
		return 0, fmt.Errorf("want a duration string such as \"10s\" or a non-negative number of milliseconds, got %s", raw)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// ConfigError is an invalid thresholds configuration. The runner maps it to
// k6's exit code 104.
type ConfigError struct {
	Key    string     // the thresholds key, e.g. "http_req_duration{status:200}"
	Source string     // the expression, when one is at fault
	Type   MetricType // the metric's type, when known
	Msg    string     // what is wrong and how to fix it
}

// Error names the expression, the metric (or key) and what to change.
func (e *ConfigError) Error() string {
	if e.Source != "" {
		if e.Type != 0 {
			return fmt.Sprintf("threshold %q on %s %q: %s", e.Source, e.Type, e.Key, e.Msg)
		}
		return fmt.Sprintf("threshold %q on %q: %s", e.Source, e.Key, e.Msg)
	}
	return fmt.Sprintf("thresholds key %q: %s", e.Key, e.Msg)
}

// ThresholdSet holds validated thresholds by key. Build it with
// ParseThresholds; a nil *ThresholdSet means "no thresholds".
type ThresholdSet struct {
	entries []*thresholdEntry // sorted by key
}

type thresholdEntry struct {
	key    string // display name: "metric" or "metric{inner}" (inner trimmed)
	metric *Metric
	filter Tags // empty for the metric itself
	items  []thresholdItem
}

type thresholdItem struct {
	Threshold
	expr Expr
}

// Keys returns the thresholds keys, sorted, in display form ("metric" or
// "metric{tags}" with the braces' content trimmed, as k6 names submetrics).
func (ts *ThresholdSet) Keys() []string {
	if ts == nil {
		return nil
	}
	out := make([]string, len(ts.entries))
	for i, e := range ts.entries {
		out[i] = e.key
	}
	return out
}

// Thresholds returns the thresholds configured under key (display form).
func (ts *ThresholdSet) Thresholds(key string) []Threshold {
	if ts == nil {
		return nil
	}
	for _, e := range ts.entries {
		if e.key == key {
			out := make([]Threshold, len(e.items))
			for i, it := range e.items {
				out[i] = it.Threshold
			}
			return out
		}
	}
	return nil
}

// ParseThresholds validates options.thresholds against the registry (so call
// it after init, once custom metrics exist). Each key is a metric name,
// optionally with a tag filter `{key:value,...}` (keys and values trimmed,
// optionally quoted with ' or "); a key with an empty list still creates the
// submetric, which then shows in the summary. Any error is a *ConfigError
// naming the key, expression and fault.
func ParseThresholds(raw map[string][]Threshold, reg *Registry) (*ThresholdSet, error) {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ts := &ThresholdSet{}
	for _, key := range keys {
		name, filter, display, err := parseMetricKey(key)
		if err != nil {
			return nil, &ConfigError{Key: key, Msg: err.Error()}
		}
		m, ok := reg.Get(name)
		if !ok {
			msg := fmt.Sprintf("unknown metric %q", name)
			if s := suggest(name, reg.names()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, &ConfigError{Key: key, Msg: msg + "; thresholds may only name built-in metrics or metrics declared in the init context"}
		}
		for _, k := range []string{"vu", "iter"} {
			if _, has := filter.Get(k); has {
				slog.Warn("threshold tag filter uses a metadata tag that samples never carry as a tag; it will match nothing",
					"key", key, "tag", k)
			}
		}
		entry := &thresholdEntry{key: display, metric: m, filter: filter}
		for _, th := range raw[key] {
			e, err := ParseThresholdExpr(th.Source)
			if err != nil {
				return nil, &ConfigError{Key: display, Source: th.Source, Type: m.Type, Msg: err.Error()}
			}
			if !e.Method.ValidFor(m.Type) {
				return nil, &ConfigError{Key: display, Source: th.Source, Type: m.Type, Msg: wrongAggMsg(e, m.Type)}
			}
			entry.items = append(entry.items, thresholdItem{Threshold: th, expr: e})
		}
		ts.entries = append(ts.entries, entry)
	}
	sort.Slice(ts.entries, func(i, j int) bool { return ts.entries[i].key < ts.entries[j].key })
	return ts, nil
}

func wrongAggMsg(e Expr, t MetricType) string {
	var owners []string
	for _, mt := range []MetricType{Counter, Gauge, Rate, Trend} {
		if e.Method.ValidFor(mt) {
			owners = append(owners, mt.String()+"s")
		}
	}
	var valid []string
	for _, a := range validAggs[t] {
		valid = append(valid, a.String())
	}
	return fmt.Sprintf("%s is only valid for %s; use %s", e.Method, strings.Join(owners, " and "), orList(valid))
}

func orList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// parseMetricKey splits "name{k:v,...}" into the metric name, the filter and
// the display name k6 gives the submetric.
func parseMetricKey(key string) (name string, filter Tags, display string, err error) {
	k := strings.TrimSpace(key)
	open := strings.IndexByte(k, '{')
	if open < 0 {
		if strings.ContainsAny(k, "}") {
			return "", Tags{}, "", errors.New("'}' without '{'; write metric{key:value}")
		}
		if err := ValidateName(k); err != nil {
			return "", Tags{}, "", err
		}
		return k, Tags{}, k, nil
	}
	name = strings.TrimSpace(k[:open])
	if err := ValidateName(name); err != nil {
		return "", Tags{}, "", err
	}
	if !strings.HasSuffix(k, "}") {
		return "", Tags{}, "", errors.New("tag filter must end with '}'; write metric{key:value,...}")
	}
	inner := strings.TrimSpace(k[open+1 : len(k)-1])
	if inner == "" {
		return "", Tags{}, "", errors.New("empty tag filter '{}'; write metric{key:value} or drop the braces")
	}
	pairs, err := splitOutsideQuotes(inner, ',')
	if err != nil {
		return "", Tags{}, "", err
	}
	m := map[string]string{}
	for _, p := range pairs {
		if strings.TrimSpace(p) == "" {
			continue // k6 tolerates stray commas
		}
		kv, err := splitOutsideQuotes(p, ':')
		if err != nil {
			return "", Tags{}, "", err
		}
		if len(kv) < 2 {
			return "", Tags{}, "", fmt.Errorf("tag filter pair %q has no ':'; write key:value", strings.TrimSpace(p))
		}
		tk, err := unquote(kv[0])
		if err != nil {
			return "", Tags{}, "", err
		}
		tv, err := unquote(strings.Join(kv[1:], ":"))
		if err != nil {
			return "", Tags{}, "", err
		}
		if tk == "" {
			return "", Tags{}, "", fmt.Errorf("tag filter pair %q has an empty key", strings.TrimSpace(p))
		}
		if old, dup := m[tk]; dup && old != tv {
			return "", Tags{}, "", fmt.Errorf("tag filter sets %q twice (%q and %q); a sample has one value per tag", tk, old, tv)
		}
		m[tk] = tv
	}
	if len(m) == 0 {
		return "", Tags{}, "", errors.New("empty tag filter; write metric{key:value}")
	}
	return name, NewTags(m), name + "{" + inner + "}", nil
}

// splitOutsideQuotes splits s at sep where sep is not inside '...' or "...".
func splitOutsideQuotes(s string, sep byte) ([]string, error) {
	var parts []string
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{' || c == '}':
			return nil, fmt.Errorf("unexpected %q inside tag filter; quote the value if it contains braces", c)
		case c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in tag filter %q", quote, s)
	}
	return append(parts, s[start:]), nil
}

func unquote(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) > 0 && (s[0] == '"' || s[0] == '\'') {
		if len(s) < 2 || s[len(s)-1] != s[0] {
			return "", fmt.Errorf("badly quoted tag filter part %s", s)
		}
		return s[1 : len(s)-1], nil
	}
	if strings.ContainsAny(s, `"'`) {
		return "", fmt.Errorf("stray quote in tag filter part %s; quote the whole key or value", s)
	}
	return s, nil
}

// suggest returns the registered name closest to name, if it is close
// enough to be a plausible typo: within a third of its length, and never
// less than two edits. Names are sorted so ties resolve alphabetically.
func suggest(name string, names []string) string {
	sort.Strings(names)
	return spell.Closest(name, names, max(2, len(name)/3))
}
