package jsonval

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v       any
		lo, hi  int64
		want    int64
		wantErr string
	}{
		{"int", 5, 1, 10, 5, ""},
		{"int64 from a script", int64(7), 1, 10, 7, ""},
		{"integral float", 3.0, 1, 10, 3, ""},
		{"json number", json.Number("9"), 1, 10, 9, ""},
		{"uint64", uint64(4), 1, 10, 4, ""},
		{"lower bound", 1, 1, 10, 1, ""},
		{"upper bound", 10, 1, 10, 10, ""},
		{"below", 0, 1, 10, 0, "workers: want an integer in [1, 10], got 0"},
		{"above", 11, 1, 10, 0, "workers: want an integer in [1, 10], got 11"},
		{"unbounded", -1, 0, math.MaxInt64, 0, "workers: want an integer ≥ 0, got -1"},
		{"fraction", 1.5, 1, 10, 0, "workers: want an integer in [1, 10], got number 1.5"},
		{"inexact float", 1e18, 1, math.MaxInt64, 0, "workers: want an integer ≥ 1, got number 1e+18"},
		{"huge uint64", uint64(math.MaxUint64), 1, 10, 0, "workers: want an integer in [1, 10], got number 18446744073709551615"},
		{"string", "5", 1, 10, 0, `workers: want an integer in [1, 10], got string "5"`},
		{"NaN", math.NaN(), 1, 10, 0, "workers: want an integer in [1, 10], got number NaN"},
		{"null", nil, 1, 10, 0, "workers: want an integer in [1, 10], got null"},
		{"big float within exact range", 2147483647.0, 1, math.MaxInt64, 2147483647, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Int("workers", tt.v, tt.lo, tt.hi)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				var re *RangeError
				require.True(t, errors.As(err, &re))
				assert.Equal(t, "workers", re.Field)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFloat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v       any
		lo, hi  float64
		want    float64
		wantErr string
	}{
		{"float", 2.5, 0, 10, 2.5, ""},
		{"int", int64(3), 0, 10, 3, ""},
		{"json number", json.Number("1e-3"), 1e-3, 10, 1e-3, ""},
		{"tiny", 1e-300, 1e-3, 1e6, 0, "speedup_ratio: want a number in [0.001, 1000000], got 1e-300"},
		{"huge", 1e308, 1e-3, 1e6, 0, "speedup_ratio: want a number in [0.001, 1000000], got 1e+308"},
		{"NaN", math.NaN(), 0, math.Inf(1), 0, "speedup_ratio: want a number ≥ 0, got NaN"},
		{"Inf", math.Inf(1), 0, math.Inf(1), 0, "speedup_ratio: want a number ≥ 0, got +Inf"},
		{"zero above zero", 0.0, AboveZero, math.Inf(1), 0, "speedup_ratio: want a number > 0, got 0"},
		{"above zero bounded", -1.0, AboveZero, 5, 0, "speedup_ratio: want a number in (0, 5], got -1"},
		{"bool", true, 0, 1, 0, "speedup_ratio: want a number in [0, 1], got boolean true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Float("speedup_ratio", tt.v, tt.lo, tt.hi)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.want, got, 0)
		})
	}
}

func TestMillis(t *testing.T) {
	t.Parallel()
	d, err := Millis("drain", 1500.0, AboveZero, MaxMillis)
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, d)

	_, err = Millis("drain", 1e18, AboveZero, math.Inf(1))
	require.EqualError(t, err, "drain: want a number of milliseconds in (0, 1000000000000], got 1e+18",
		"hi is capped at what a Duration holds")
	_, err = Millis("sleep", -1, 0, 1e9)
	require.EqualError(t, err, "sleep: want a number of milliseconds in [0, 1000000000], got -1")

	d, err = Millis("drain", MaxMillis, AboveZero, MaxMillis)
	require.NoError(t, err)
	assert.Positive(t, d, "the largest accepted value does not overflow")
}

// TestAsUint_OneRuleForIntegers: unsigned reads take what AsInt takes,
// and beyond 2^63 only what cannot have been rounded (a uint64, a
// json.Number's digits); negatives and rounded floats are refused.
func TestAsUint_OneRuleForIntegers(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want uint64
		ok   bool
	}{
		{uint64(1 << 63), 1 << 63, true},
		{json.Number("18446744073709551615"), 18446744073709551615, true},
		{float64(1 << 53), 1 << 53, true},
		{float64(1<<53) * 2, 0, false},
		{-1, 0, false},
		{json.Number("-3"), 0, false},
		{2.5, 0, false},
		{"7", 0, false},
		{int32(7), 7, true},
	} {
		got, ok := AsUint(tc.v)
		assert.Equal(t, tc.ok, ok, "%#v", tc.v)
		assert.Equal(t, tc.want, got, "%#v", tc.v)
	}
	n, ok := AsInt(float64(1<<53) * 4)
	assert.False(t, ok, "an integral float past 2^53 may have been rounded: %d", n)
}
