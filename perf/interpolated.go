package perf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Table is measured profile data for an Interpolated model. Its JSON keys
// are the array names of Dynamo's planner NPZ profiles, so converting one is
// a matter of writing each array out as a JSON list.
type Table struct {
	// PrefillISL are the new (uncached) token counts of a prefill pass,
	// strictly increasing.
	PrefillISL []float64 `json:"prefill_isl"`
	// PrefillTTFTMs[i] is the measured prefill time at PrefillISL[i], ms.
	PrefillTTFTMs []float64 `json:"prefill_ttft_ms"`
	// DecodeActiveKVTokens is the first decode axis: KV tokens in use,
	// strictly increasing.
	DecodeActiveKVTokens []float64 `json:"decode_active_kv_tokens"`
	// DecodeContextLength is the second decode axis: mean context length of
	// the batch, strictly increasing.
	DecodeContextLength []float64 `json:"decode_context_length"`
	// DecodeITLMs[i][j] is the measured decode step time at
	// DecodeActiveKVTokens[i] and DecodeContextLength[j], ms.
	DecodeITLMs [][]float64 `json:"decode_itl"`
}

// Interpolated is a Model read from profile data, with the semantics of
// Dynamo's NPZ-backed model: prefill is piecewise linear in the batch's
// uncached tokens, batch × (meanISL − meanPrefix), decode is bilinear in
// (active KV tokens, mean context length); both extend linearly beyond the
// measured range, prefill never goes below 0 and decode never below
// MinDecodeMs. An axis measured at a single point is constant along that
// axis. Build one with NewInterpolated or LoadInterpolated; it is immutable
// and safe for concurrent use.
type Interpolated struct {
	prefillX, prefillY []float64
	decodeX, decodeY   []float64
	decodeZ            [][]float64
}

var _ Model = (*Interpolated)(nil)

// NewInterpolated checks table and builds a model from a copy of it. The
// error names the array and index that are wrong: every array non-empty,
// values finite, axes non-negative and strictly increasing, latencies ≥ 0,
// prefill arrays of equal length, and decode_itl shaped
// len(decode_active_kv_tokens) rows × len(decode_context_length) columns.
func NewInterpolated(table Table) (*Interpolated, error) {
	if err := table.validate(); err != nil {
		return nil, err
	}
	m := &Interpolated{
		prefillX: append([]float64(nil), table.PrefillISL...),
		prefillY: append([]float64(nil), table.PrefillTTFTMs...),
		decodeX:  append([]float64(nil), table.DecodeActiveKVTokens...),
		decodeY:  append([]float64(nil), table.DecodeContextLength...),
		decodeZ:  make([][]float64, len(table.DecodeITLMs)),
	}
	for i, row := range table.DecodeITLMs {
		m.decodeZ[i] = append([]float64(nil), row...)
	}
	return m, nil
}

// LoadInterpolated reads a Table from path and builds a model from it.
// path is either a JSON table (format in the package documentation), in
// which unknown keys are an error so a misspelt array name is caught, a
// NumPy .npz archive of the same five arrays (Dynamo's mocker-format NPZ),
// recognised by its content, from which they are read by name and others
// ignored, or a directory of Dynamo's profiler results, whose
// selected_prefill_interpolation/raw_data.npz and
// selected_decode_interpolation/raw_data.npz (or the older
// prefill_raw_data.json and decode_raw_data.json) are read as
// loadProfileDir says.
func LoadInterpolated(path string) (*Interpolated, error) {
	if isProfileDir(path) {
		table, err := loadProfileDir(path)
		if err != nil {
			return nil, fmt.Errorf("profiler results %s: %w", path, err)
		}
		m, err := NewInterpolated(table)
		if err != nil {
			return nil, fmt.Errorf("profiler results %s: %w", path, err)
		}
		return m, nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fmt.Errorf("profile table %s: a directory, but not a profiler results directory (one holds %s and %s, "+
			"or the older %s and %s); or give a JSON table or an NPZ file", path, profilePrefillNPZ, profileDecodeNPZ, profilePrefillJSON, profileDecodeJSON)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile table: %w", err)
	}
	var table Table
	if bytes.HasPrefix(data, npzMagic) {
		table, err = decodeNPZTable(data)
	} else {
		table, err = decodeTable(data)
	}
	if err != nil {
		return nil, fmt.Errorf("profile table %s: %w", path, err)
	}
	m, err := NewInterpolated(table)
	if err != nil {
		return nil, fmt.Errorf("profile table %s: %w", path, err)
	}
	return m, nil
}

func decodeTable(data []byte) (Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Table
	if err := dec.Decode(&t); err != nil {
		return Table{}, fmt.Errorf("decode JSON (keys: prefill_isl, prefill_ttft_ms, decode_active_kv_tokens, decode_context_length, decode_itl): %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Table{}, errors.New("decode JSON: unexpected data after the table object")
	}
	return t, nil
}

// FromProfile returns the model for an engine's planner_profile_data: the
// Polynomial model when path is empty, otherwise the Interpolated model
// loaded from the table at path. Unlike Dynamo, which logs a failed load and
// falls back to the polynomial model, a table that cannot be read or is
// invalid is an error: whoever names a profile wants its timings, and a run
// on silently different ones would mislead.
func FromProfile(path string) (Model, error) {
	if path == "" {
		return Polynomial{}, nil
	}
	m, err := LoadInterpolated(path)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// PrefillMs implements Model.
func (m *Interpolated) PrefillMs(batch int, meanISL, meanPrefix float64) float64 {
	t := float64(batch) * (meanISL - meanPrefix)
	if batch <= 0 || !(t > 0) {
		return 0
	}
	i, f := locate(m.prefillX, t)
	y := m.prefillY[i]
	if f != 0 {
		y += f * (m.prefillY[i+1] - m.prefillY[i])
	}
	return math.Max(0, y)
}

// DecodeMs implements Model. The pool size is not an input of the
// profile: measured step times already reflect the hardware they ran on.
func (m *Interpolated) DecodeMs(batch int, activeKVTokens, _ float64, contextLen float64) float64 {
	if batch <= 0 {
		return 0
	}
	i, fx := locate(m.decodeX, activeKVTokens)
	j, fy := locate(m.decodeY, contextLen)
	// Corners of the cell (or edge cell, when extrapolating); a single-point
	// axis has no neighbour and its weight is 0.
	at := func(di, dj int) float64 {
		r, c := i+di, j+dj
		if r >= len(m.decodeX) {
			r = i
		}
		if c >= len(m.decodeY) {
			c = j
		}
		return m.decodeZ[r][c]
	}
	z := (1-fx)*(1-fy)*at(0, 0) + fx*(1-fy)*at(1, 0) + (1-fx)*fy*at(0, 1) + fx*fy*at(1, 1)
	if math.IsNaN(z) {
		return MinDecodeMs
	}
	return math.Max(MinDecodeMs, z)
}

// locate returns the index i of the segment [xs[i], xs[i+1]] used for x and
// x's fractional position in it: inside [0, 1] within the axis, below 0 or
// above 1 when x lies beyond the first or last point, so the end segments
// extend linearly. A single-point axis gives (0, 0).
func locate(xs []float64, x float64) (int, float64) {
	n := len(xs)
	if n == 1 {
		return 0, 0
	}
	// First index whose value exceeds x, less one, clamped to a segment.
	i := sort.SearchFloat64s(xs, x)
	if i < n && xs[i] == x {
		if i == n-1 {
			return n - 2, 1
		}
		return i, 0
	}
	i--
	i = max(0, min(i, n-2))
	return i, (x - xs[i]) / (xs[i+1] - xs[i])
}

func (t Table) validate() error {
	if err := checkAxis("prefill_isl", t.PrefillISL); err != nil {
		return err
	}
	if len(t.PrefillTTFTMs) != len(t.PrefillISL) {
		return fmt.Errorf("prefill_ttft_ms has %d values but prefill_isl has %d points; they must pair up", len(t.PrefillTTFTMs), len(t.PrefillISL))
	}
	if err := checkLatencies("prefill_ttft_ms", t.PrefillTTFTMs); err != nil {
		return err
	}
	if err := checkAxis("decode_active_kv_tokens", t.DecodeActiveKVTokens); err != nil {
		return err
	}
	if err := checkAxis("decode_context_length", t.DecodeContextLength); err != nil {
		return err
	}
	if len(t.DecodeITLMs) != len(t.DecodeActiveKVTokens) {
		return fmt.Errorf("decode_itl has %d rows but decode_active_kv_tokens has %d points; want one row per active_kv_tokens value", len(t.DecodeITLMs), len(t.DecodeActiveKVTokens))
	}
	for i, row := range t.DecodeITLMs {
		if len(row) != len(t.DecodeContextLength) {
			return fmt.Errorf("decode_itl row %d has %d values but decode_context_length has %d points; want one column per context_length value", i, len(row), len(t.DecodeContextLength))
		}
		if err := checkLatencies(fmt.Sprintf("decode_itl[%d]", i), row); err != nil {
			return err
		}
	}
	return nil
}

func checkAxis(name string, xs []float64) error {
	if len(xs) == 0 {
		return fmt.Errorf("%s is empty or missing; want at least one point", name)
	}
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("%s[%d] = %g; axis values must be finite and ≥ 0", name, i, x)
		}
		if i > 0 && x <= xs[i-1] {
			return fmt.Errorf("%s[%d] = %g is not above %s[%d] = %g; axis values must be strictly increasing", name, i, x, name, i-1, xs[i-1])
		}
	}
	return nil
}

func checkLatencies(name string, ys []float64) error {
	for i, y := range ys {
		if math.IsNaN(y) || math.IsInf(y, 0) || y < 0 {
			return fmt.Errorf("%s[%d] = %g; latencies must be finite and ≥ 0 ms", name, i, y)
		}
	}
	return nil
}
