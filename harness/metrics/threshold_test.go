package metrics

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseThresholdExpr_Valid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		meth AggregationMethod
		pct  float64
		op   Operator
		val  float64
		agg  string
	}{
		{"p(95)<200", AggPercentile, 95, OpLess, 200, "p(95)"},
		{"p(99.9) <= 1.5", AggPercentile, 99.9, OpLessEqual, 1.5, "p(99.9)"},
		{" p( 0 )>=0 ", AggPercentile, 0, OpGreaterEqual, 0, "p(0)"},
		{"p(100)>-3", AggPercentile, 100, OpGreater, -3, "p(100)"},
		{"avg<100", AggAvg, 0, OpLess, 100, "avg"},
		{"min > 0.5", AggMin, 0, OpGreater, 0.5, "min"},
		{"max\t<\t1e3", AggMax, 0, OpLess, 1000, "max"},
		{"med==4", AggMed, 0, OpEqual, 4, "med"},
		{"count===10", AggCount, 0, OpEqual, 10, "count"},
		{"count != 0", AggCount, 0, OpNotEqual, 0, "count"},
		{"rate>=0.95", AggRate, 0, OpGreaterEqual, 0.95, "rate"},
		{"rate<.01", AggRate, 0, OpLess, 0.01, "rate"},
		{"value>-1.25", AggValue, 0, OpGreater, -1.25, "value"},
		{"value<+7", AggValue, 0, OpLess, 7, "value"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			e, err := ParseThresholdExpr(tt.src)
			require.NoError(t, err)
			assert.Equal(t, tt.meth, e.Method)
			assert.Equal(t, tt.pct, e.Percentile)
			assert.Equal(t, tt.op, e.Op)
			assert.Equal(t, tt.val, e.Value)
			assert.Equal(t, tt.agg, e.Aggregation())
			assert.Equal(t, tt.src, e.Source)
		})
	}
}

func TestParseThresholdExpr_Invalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src     string
		wantMsg string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"p(95)", "no comparison operator"},
		{"<200", "missing aggregation"},
		{"avg<", "missing number"},
		{"avg<abc", "invalid number"},
		{"avg<<5", "invalid number"},
		{"avg=5", "invalid operator"},
		{"avg!5", "invalid operator"},
		{"avg=>5", "invalid operator"},
		{"mean<5", "unknown aggregation \"mean\""},
		{"p95<5", "unknown aggregation"},
		{"P(95)<5", "unknown aggregation"},
		{"p(95<5", "unknown aggregation"},
		{"p(101)<5", "between 0 and 100"},
		{"p(-1)<5", "between 0 and 100"},
		{"p(x)<5", "invalid percentile"},
		{"p()<5", "invalid percentile"},
		{"avg<inf", "invalid number"},
		{"avg<NaN", "invalid number"},
		{"avg<0x10", "invalid number"},
		{"avg<1_000", "invalid number"},
		{"avg<1e999", "invalid number"},
		{"avg<5 ms", "invalid number"},
		{"avg 5", "no comparison operator"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := ParseThresholdExpr(tt.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestExpr_Holds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src      string
		observed float64
		want     bool
	}{
		{"avg<5", 4.9, true}, {"avg<5", 5, false},
		{"avg<=5", 5, true}, {"avg<=5", 5.1, false},
		{"avg>5", 5.1, true}, {"avg>5", 5, false},
		{"avg>=5", 5, true}, {"avg>=5", 4.9, false},
		{"avg==5", 5, true}, {"avg===5", 5, true}, {"avg==5", 6, false},
		{"avg!=5", 6, true}, {"avg!=5", 5, false},
	}
	for _, tt := range tests {
		e, err := ParseThresholdExpr(tt.src)
		require.NoError(t, err)
		assert.Equal(t, tt.want, e.Holds(tt.observed), "%s with %v", tt.src, tt.observed)
	}
}

func testRegistry(t *testing.T) *Registry {
	t.Helper()
	reg := NewRegistry()
	reg.MustRegister("http_req_duration", Trend, Time)
	reg.MustRegister("iterations", Counter, Default)
	reg.MustRegister("mocker_kv_aborts", Counter, Default)
	reg.MustRegister("vus", Gauge, Default)
	reg.MustRegister("checks", Rate, Default)
	reg.MustRegister("data_sent", Counter, Data)
	return reg
}

func ths(srcs ...string) []Threshold {
	out := make([]Threshold, len(srcs))
	for i, s := range srcs {
		out[i] = Threshold{Source: s}
	}
	return out
}

func TestParseThresholds_AggregationPerType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, src string
		ok       bool
	}{
		{"iterations", "count>0", true},
		{"iterations", "rate>1", true},
		{"iterations", "value>1", false},
		{"iterations", "avg>1", false},
		{"vus", "value>1", true},
		{"vus", "rate>1", false},
		{"vus", "count>1", false},
		{"checks", "rate>0.9", true},
		{"checks", "count>1", false},
		{"checks", "p(95)>1", false},
		{"http_req_duration", "avg<1", true},
		{"http_req_duration", "min<1", true},
		{"http_req_duration", "max<1", true},
		{"http_req_duration", "med<1", true},
		{"http_req_duration", "p(99.99)<1", true},
		{"http_req_duration", "count<1", false},
		{"http_req_duration", "rate<1", false},
		{"http_req_duration", "value<1", false},
	}
	reg := testRegistry(t)
	for _, tt := range tests {
		_, err := ParseThresholds(map[string][]Threshold{tt.key: ths(tt.src)}, reg)
		if tt.ok {
			assert.NoError(t, err, "%s %s", tt.key, tt.src)
			continue
		}
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "%s %s: %v", tt.key, tt.src, err)
		assert.Equal(t, tt.src, ce.Source)
		assert.Contains(t, err.Error(), tt.key)
		assert.Contains(t, err.Error(), "only valid for")
	}
}

func TestParseThresholds_ErrorMessagesNameWhatToFix(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	tests := []struct {
		key  string
		srcs []string
		want string
	}{
		{"mocker_kv_aborts", []string{"p(95)<200"},
			`threshold "p(95)<200" on counter "mocker_kv_aborts": p(N) is only valid for trends; use count or rate`},
		{"vus", []string{"avg<3"},
			`threshold "avg<3" on gauge "vus": avg is only valid for trends; use value`},
		{"checks", []string{"count>3"},
			`threshold "count>3" on rate "checks": count is only valid for counters; use rate`},
		{"http_req_duration", []string{"rate<3"},
			`threshold "rate<3" on trend "http_req_duration": rate is only valid for counters and rates; use avg, min, max, med or p(N)`},
		{"http_req_duration{status:200}", []string{"p(95)<<1"},
			`threshold "p(95)<<1" on trend "http_req_duration{status:200}": invalid number "<1"`},
		{"http_req_duraton", nil, `unknown metric "http_req_duraton" (did you mean "http_req_duration"?)`},
		{"zzzzzz", nil, `unknown metric "zzzzzz"; thresholds`},
		{"9bad", nil, `thresholds key "9bad": invalid metric name`},
	}
	for _, tt := range tests {
		_, err := ParseThresholds(map[string][]Threshold{tt.key: ths(tt.srcs...)}, reg)
		require.Error(t, err, tt.key)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce))
		assert.Contains(t, err.Error(), tt.want)
	}
}

func TestParseThresholds_TagFilters(t *testing.T) {
	t.Parallel()
	reg := testRegistry(t)
	valid := []struct {
		key     string
		display string
		tags    map[string]string
	}{
		{"http_req_duration{status:200}", "http_req_duration{status:200}", map[string]string{"status": "200"}},
		{"http_req_duration{ status : 200 }", "http_req_duration{status : 200}", map[string]string{"status": "200"}},
		{`http_req_duration{status:"200"}`, `http_req_duration{status:"200"}`, map[string]string{"status": "200"}},
		{`http_req_duration{'status':'200'}`, `http_req_duration{'status':'200'}`, map[string]string{"status": "200"}},
		{"http_req_duration{status:200,method:GET}", "http_req_duration{status:200,method:GET}", map[string]string{"status": "200", "method": "GET"}},
		{`http_req_duration{name:"a,b"}`, `http_req_duration{name:"a,b"}`, map[string]string{"name": "a,b"}},
		{`http_req_duration{url:http://x:80/}`, `http_req_duration{url:http://x:80/}`, map[string]string{"url": "http://x:80/"}},
		{`http_req_duration{status:200,}`, `http_req_duration{status:200,}`, map[string]string{"status": "200"}},
		{`http_req_duration{status:}`, `http_req_duration{status:}`, map[string]string{"status": ""}},
		{` http_req_duration {status:200} `, `http_req_duration{status:200}`, map[string]string{"status": "200"}},
	}
	for _, tt := range valid {
		ts, err := ParseThresholds(map[string][]Threshold{tt.key: ths("p(95)<1")}, reg)
		require.NoError(t, err, tt.key)
		require.Len(t, ts.entries, 1)
		assert.Equal(t, tt.display, ts.entries[0].key, tt.key)
		assert.Equal(t, tt.tags, ts.entries[0].filter.Map(), tt.key)
		assert.Equal(t, []string{tt.display}, ts.Keys())
		assert.Equal(t, ths("p(95)<1"), ts.Thresholds(tt.display))
	}
	invalid := []struct{ key, want string }{
		{"http_req_duration{}", "empty tag filter"},
		{"http_req_duration{ , }", "empty tag filter"},
		{"http_req_duration{status}", "has no ':'"},
		{"http_req_duration{status:200", "must end with '}'"},
		{"http_req_duration{status:200}x", "must end with '}'"},
		{"http_req_duration status:200}", "'}' without '{'"},
		{"http_req_duration{:200}", "empty key"},
		{`http_req_duration{status:"200}`, "unterminated"},
		{`http_req_duration{status:"200'}`, "unterminated"},
		{`http_req_duration{status:2"00}`, "unterminated"},
		{`http_req_duration{status:"20"0}`, "badly quoted"},
		{"http_req_duration{a:{b}}", "unexpected"},
		{"http_req_duration{a:1,a:2}", "twice"},
		{"{status:200}", "invalid metric name"},
	}
	for _, tt := range invalid {
		_, err := ParseThresholds(map[string][]Threshold{tt.key: ths("p(95)<1")}, reg)
		require.Error(t, err, tt.key)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), tt.key)
		assert.Contains(t, err.Error(), tt.want, tt.key)
		assert.Contains(t, err.Error(), "thresholds key", tt.key)
	}
}

func TestParseThresholds_EmptyListStillDefinesSubmetric(t *testing.T) {
	t.Parallel()
	ts, err := ParseThresholds(map[string][]Threshold{"http_req_duration{scenario:a}": {}}, testRegistry(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"http_req_duration{scenario:a}"}, ts.Keys())
	assert.Empty(t, ts.Thresholds("http_req_duration{scenario:a}"))
}

func TestThreshold_UnmarshalJSON(t *testing.T) {
	t.Parallel()
	var raw map[string][]Threshold
	err := json.Unmarshal([]byte(`{
		"http_req_duration": ["p(95)<200", {"threshold": "avg<100", "abortOnFail": true, "delayAbortEval": "10s"}],
		"checks": [{"threshold": "rate>0.9", "abortOnFail": true, "delayAbortEval": 1500}, {"threshold": "rate>0.5"}]
	}`), &raw)
	require.NoError(t, err)
	assert.Equal(t, []Threshold{
		{Source: "p(95)<200"},
		{Source: "avg<100", AbortOnFail: true, DelayAbortEval: 10 * time.Second},
	}, raw["http_req_duration"])
	assert.Equal(t, []Threshold{
		{Source: "rate>0.9", AbortOnFail: true, DelayAbortEval: 1500 * time.Millisecond},
		{Source: "rate>0.5"},
	}, raw["checks"])

	bad := []struct{ in, want string }{
		{`5`, "string or an object"},
		{`{"abortOnFail": true}`, "no \"threshold\""},
		{`{"threshold": "rate>1", "abortOnfail": true}`, `unknown field "abortOnfail"`},
		{`{"threshold": 5}`, `"threshold" must be a string`},
		{`{"threshold": "rate>1", "abortOnFail": "yes"}`, "must be a boolean"},
		{`{"threshold": "rate>1", "delayAbortEval": "ten seconds"}`, "invalid duration"},
		{`{"threshold": "rate>1", "delayAbortEval": "-1s"}`, "must not be negative"},
		{`{"threshold": "rate>1", "delayAbortEval": true}`, "duration string"},
	}
	for _, tt := range bad {
		var th Threshold
		err := json.Unmarshal([]byte(tt.in), &th)
		require.Error(t, err, tt.in)
		assert.Contains(t, err.Error(), tt.want, tt.in)
	}
}
