package jsonval

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// AboveZero as a lower bound of Float or Millis reads "> 0": any positive
// number is accepted, zero is not.
const AboveZero = math.SmallestNonzeroFloat64

// maxExactInt is the largest integer a float64 holds exactly; an integral
// float beyond it may already have been rounded.
const maxExactInt = 1 << 53

// RangeError says a field holds a value of the wrong kind or outside its
// range. Every reader of this package returns one, so a message reads the
// same wherever a number comes from: "<field>: want <what>, got <value>".
type RangeError struct {
	Field string // the name given to the reader, a path like "decode.workers"
	Want  string // "an integer in [1, 1024]", "a number of milliseconds > 0"
	Got   string // the value: "-1", "number 1.5", "string \"x\""
}

// Error reads "<field>: want <what>, got <value>".
func (e *RangeError) Error() string {
	return fmt.Sprintf("%s: want %s, got %s", e.Field, e.Want, e.Got)
}

// Int reads an integer in [lo, hi] from a value decoded from JSON or
// exported from a JavaScript runtime: any Go integer type, an integral
// float64 or float32 (exact, so within ±2^53) or a json.Number. Anything
// else, or a value out of range, is a *RangeError naming field. Pass
// math.MaxInt64 as hi for no upper bound.
func Int(field string, v any, lo, hi int64) (int64, error) {
	// The range is put in words only for an error: scripts read numbers
	// on every request.
	want := func() string { return "an integer " + span(float64(lo), float64(hi), hi == math.MaxInt64) }
	n, ok := asInt(v)
	if !ok {
		return 0, &RangeError{Field: field, Want: want(), Got: Describe(v)}
	}
	if n < lo || n > hi {
		return 0, &RangeError{Field: field, Want: want(), Got: strconv.FormatInt(n, 10)}
	}
	return n, nil
}

// Float reads a finite number in [lo, hi] (lo = AboveZero for "> 0", hi =
// math.Inf(1) for no upper bound) from the same kinds of value as Int.
// NaN and ±Inf are refused whatever the range.
func Float(field string, v any, lo, hi float64) (float64, error) {
	return float(field, v, lo, hi, "a number")
}

// Millis reads a finite number of milliseconds in [lo, hi] as a Duration,
// so a value whose Duration would overflow (or come out negative) never
// reaches a timer: keep hi at most MaxMillis.
func Millis(field string, v any, lo, hi float64) (time.Duration, error) {
	ms, err := float(field, v, lo, min(hi, MaxMillis), "a number of milliseconds")
	if err != nil {
		return 0, err
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// MaxMillis caps every Millis range: 1e12 ms (about 31.7 years) is well
// inside what a time.Duration holds (about 292 years), so a product or sum
// of such durations does not overflow either.
const MaxMillis = 1e12

func float(field string, v any, lo, hi float64, noun string) (float64, error) {
	want := func() string { return noun + " " + span(lo, hi, math.IsInf(hi, 1)) }
	f, ok := asFloat(v)
	if !ok {
		return 0, &RangeError{Field: field, Want: want(), Got: Describe(v)}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < lo || f > hi {
		return 0, &RangeError{Field: field, Want: want(), Got: formatNumber(f)}
	}
	return f, nil
}

// span words a range: "≥ 1", "> 0", "in [1, 1024]".
func span(lo, hi float64, unbounded bool) string {
	low := "≥ " + formatNumber(lo)
	if lo == AboveZero {
		low = "> 0"
	}
	switch {
	case unbounded:
		return low
	case lo == AboveZero:
		return "in (0, " + formatNumber(hi) + "]"
	default:
		return "in [" + formatNumber(lo) + ", " + formatNumber(hi) + "]"
	}
}

// formatNumber prints integers in full up to 2^53 (every one of them exact
// in a float64) and anything else in the shortest form.
func formatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// AsInt reads an integer from any Go integer type, an integral float64 or
// float32 within ±2^53 (beyond it a float may already have been rounded),
// or a json.Number; false for anything else. It is the one rule for what
// counts as an integer in a config or a script: Int applies it and adds a
// range.
func AsInt(v any) (int64, bool) { return asInt(v) }

// AsUint is AsInt for unsigned values, which may go past 2^63 when given
// as a uint, a uint64 or a json.Number; negative values are false.
func AsUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint:
		return uint64(x), true
	case uint64:
		return x, true
	case json.Number:
		if u, err := strconv.ParseUint(x.String(), 10, 64); err == nil {
			return u, true
		}
	}
	n, ok := asInt(v)
	if !ok || n < 0 {
		return 0, false
	}
	return uint64(n), true
}

// AsFloat reads a number from the kinds AsInt reads and any float64,
// float32 or json.Number; false for anything else. NaN and ±Inf pass: Float
// refuses them.
func AsFloat(v any) (float64, bool) { return asFloat(v) }

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), uint64(x) <= math.MaxInt64
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case float64:
		return int64(x), x == math.Trunc(x) && math.Abs(x) <= maxExactInt
	case float32:
		return asInt(float64(x))
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, true
		}
		if f, err := x.Float64(); err == nil {
			return asInt(f)
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	if n, ok := asInt(v); ok {
		return float64(n), true
	}
	return 0, false
}
