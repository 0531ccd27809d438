package metrics

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		// k6: ^[a-zA-Z_][a-zA-Z0-9_]{1,128}$, so 2 to 129 characters
		{"a", false},
		{"_", false},
		{"ab", true},
		{"__", true},
		{"a1", true},
		{"http_req_duration", true},
		{"mocker_kv_aborts2", true},
		{"A_B_9", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), true},
		{strings.Repeat("x", 130), false},
		{"", false},
		{"9lives", false},
		{"with-dash", false},
		{"with space", false},
		{"dotted.name", false},
		{"ünicode", false},
		{"curly{x:y}", false},
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if tt.ok {
			assert.NoError(t, err, tt.name)
		} else {
			assert.Error(t, err, tt.name)
		}
	}
}

func TestRegistry_RegisterIsIdempotentAndRejectsConflicts(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	a, err := reg.Register("lat", Trend, Time)
	require.NoError(t, err)
	b, err := reg.Register("lat", Trend, Time)
	require.NoError(t, err)
	assert.Same(t, a, b)

	_, err = reg.Register("lat", Counter, Time)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"lat"`)
	assert.Contains(t, err.Error(), "trend")
	assert.Contains(t, err.Error(), "counter")

	_, err = reg.Register("lat", Trend, Default)
	require.Error(t, err)

	_, err = reg.Register("bad-name", Counter, Default)
	require.Error(t, err)
	_, err = reg.Register("ok", MetricType(9), Default)
	require.Error(t, err)

	got, ok := reg.Get("lat")
	require.True(t, ok)
	assert.Same(t, a, got)
	_, ok = reg.Get("missing")
	assert.False(t, ok)
}

func TestRegistry_AllSortedByName(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	for _, n := range []string{"vus", "checks", "iterations", "data_sent"} {
		reg.MustRegister(n, Counter, Default)
	}
	var names []string
	for _, m := range reg.All() {
		names = append(names, m.Name)
	}
	assert.Equal(t, []string{"checks", "data_sent", "iterations", "vus"}, names)
}

func TestMetricType_Strings(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []string{"counter", "gauge", "rate", "trend"},
		[]string{Counter.String(), Gauge.String(), Rate.String(), Trend.String()})
	assert.Equal(t, []string{"default", "time", "data"},
		[]string{Default.String(), Time.String(), Data.String()})
	for _, mt := range []MetricType{Counter, Gauge, Rate, Trend} {
		back, err := ParseMetricType(mt.String())
		require.NoError(t, err)
		assert.Equal(t, mt, back)
	}
	_, err := ParseMetricType("histogram")
	assert.Error(t, err)
}
