package perf

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const exampleProfile = "testdata/profile.json"

// The example table (testdata/profile.json):
//
//	prefill_isl      128  512  1024  2048
//	prefill_ttft_ms   20   40    70   130
//
//	decode_itl        ctx=100  ctx=1100
//	active=1000          5        6
//	active=5000          9       11
//	active=9000         13       16
func loadExample(t *testing.T) *Interpolated {
	t.Helper()
	m, err := LoadInterpolated(exampleProfile)
	require.NoError(t, err)
	return m
}

func TestInterpolated_PrefillMs(t *testing.T) {
	t.Parallel()
	checkPrefill(t, loadExample(t), []prefillCase{
		{"first point", 1, 128, 0, 20},
		{"inner point", 1, 512, 0, 40},
		{"inner point", 1, 1024, 0, 70},
		{"last point", 1, 2048, 0, 130},
		// 320 is halfway from 128 to 512: (20+40)/2.
		{"midpoint", 1, 320, 0, 30},
		// 1536 is halfway from 1024 to 2048: (70+130)/2.
		{"midpoint", 1, 1536, 0, 100},
		// T = 4·(200−72) = 512.
		{"batch times uncached tokens", 4, 200, 72, 40},
		// Last slope (130−70)/1024 per token, 2048 tokens past the end: 130 + 120.
		{"extrapolate above", 1, 4096, 0, 250},
		// First slope 20/384 per token, 64 tokens before the start: 20 − 10/3.
		{"extrapolate below", 1, 64, 0, 20 - 10.0/3},
		{"nothing to compute", 1, 512, 512, 0},
		{"empty batch", 0, 512, 0, 0},
	})
}

func TestInterpolated_DecodeMs(t *testing.T) {
	t.Parallel()
	m := loadExample(t)
	cases := []struct {
		name        string
		active, ctx float64
		want        float64
	}{
		{"grid corner", 1000, 100, 5},
		{"grid corner", 9000, 1100, 16},
		{"grid point", 5000, 100, 9},
		{"grid point", 5000, 1100, 11},
		// Halfway on both axes of the first cell: (5+9+6+11)/4.
		{"cell centre", 3000, 600, 7.75},
		// Halfway between 9 and 13 along active KV.
		{"edge midpoint", 7000, 100, 11},
		// Halfway between 9 and 11 along context length.
		{"edge midpoint", 5000, 600, 10},
		// Last cell, fx = fy = 2: 9 − 2·13 − 2·11 + 4·16.
		{"extrapolate both above", 13000, 2100, 25},
		// First cell, fx = −0.25 on the ctx=100 edge: 5 − 0.25·4.
		{"extrapolate active below", 0, 100, 4},
		// Beyond ctx on the active=1000 edge: 6 + 1·(6−5).
		{"extrapolate context above", 1000, 2100, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.InDelta(t, c.want, m.DecodeMs(4, c.active, 1e9, c.ctx), 1e-9)
		})
	}
	assert.Zero(t, m.DecodeMs(0, 3000, 1e9, 600), "no sequences, no decode")
	assert.Equal(t, m.DecodeMs(4, 3000, 10, 600), m.DecodeMs(4, 3000, 1e9, 600), "pool size is not a profile input")
}

func TestInterpolated_Floors(t *testing.T) {
	t.Parallel()
	m, err := NewInterpolated(Table{
		PrefillISL:           []float64{100, 200},
		PrefillTTFTMs:        []float64{10, 110},
		DecodeActiveKVTokens: []float64{100, 200},
		DecodeContextLength:  []float64{10},
		DecodeITLMs:          [][]float64{{2}, {4}},
	})
	require.NoError(t, err)
	// Slope 1 ms/token: 50 tokens extrapolate to 10 − 50 = −40, clamped.
	assert.Equal(t, 0.0, m.PrefillMs(1, 50, 0))
	// Slope 0.02 ms/token: 0 tokens extrapolate to 2 − 2 = 0, floored.
	assert.Equal(t, MinDecodeMs, m.DecodeMs(1, 0, 0, 10))
	assert.Equal(t, MinDecodeMs, m.DecodeMs(1, math.NaN(), 0, 10))
}

func TestInterpolated_SinglePointAxisIsConstant(t *testing.T) {
	t.Parallel()
	m, err := NewInterpolated(Table{
		PrefillISL:           []float64{512},
		PrefillTTFTMs:        []float64{40},
		DecodeActiveKVTokens: []float64{100, 200},
		DecodeContextLength:  []float64{10},
		DecodeITLMs:          [][]float64{{2}, {4}},
	})
	require.NoError(t, err)
	for _, tok := range []float64{1, 512, 1e6} {
		assert.Equal(t, 40.0, m.PrefillMs(1, tok, 0), "tokens %g", tok)
	}
	// Constant along context length, linear along active KV: 2 + 0.5·2.
	for _, ctx := range []float64{0, 10, 99999} {
		assert.InDelta(t, 3.0, m.DecodeMs(1, 150, 0, ctx), 1e-12, "ctx %g", ctx)
	}

	one, err := NewInterpolated(Table{
		PrefillISL: []float64{1}, PrefillTTFTMs: []float64{7},
		DecodeActiveKVTokens: []float64{1}, DecodeContextLength: []float64{1},
		DecodeITLMs: [][]float64{{12}},
	})
	require.NoError(t, err)
	assert.Equal(t, 12.0, one.DecodeMs(3, 5000, 0, 700))
}

func TestInterpolated_CopiesTable(t *testing.T) {
	t.Parallel()
	table := Table{
		PrefillISL: []float64{0, 100}, PrefillTTFTMs: []float64{0, 10},
		DecodeActiveKVTokens: []float64{0, 100}, DecodeContextLength: []float64{0, 100},
		DecodeITLMs: [][]float64{{2, 2}, {4, 4}},
	}
	m, err := NewInterpolated(table)
	require.NoError(t, err)
	table.PrefillTTFTMs[1] = 1000
	table.DecodeITLMs[1][0] = 1000
	assert.InDelta(t, 5.0, m.PrefillMs(1, 50, 0), 1e-12)
	assert.InDelta(t, 3.0, m.DecodeMs(1, 50, 0, 0), 1e-12)
}

func TestNewInterpolated_RejectsBadTables(t *testing.T) {
	t.Parallel()
	good := func() Table {
		return Table{
			PrefillISL: []float64{1, 2}, PrefillTTFTMs: []float64{1, 2},
			DecodeActiveKVTokens: []float64{1, 2}, DecodeContextLength: []float64{1, 2, 3},
			DecodeITLMs: [][]float64{{1, 2, 3}, {4, 5, 6}},
		}
	}
	_, err := NewInterpolated(good())
	require.NoError(t, err, "the base table is valid")

	cases := []struct {
		name   string
		modify func(*Table)
		says   []string
	}{
		{"missing prefill axis", func(t *Table) { t.PrefillISL = nil; t.PrefillTTFTMs = nil }, []string{"prefill_isl", "empty"}},
		{"prefill lengths differ", func(t *Table) { t.PrefillTTFTMs = []float64{1} }, []string{"prefill_ttft_ms has 1", "prefill_isl has 2"}},
		{"prefill axis descending", func(t *Table) { t.PrefillISL = []float64{2, 1} }, []string{"prefill_isl[1]", "strictly increasing"}},
		{"prefill axis repeated", func(t *Table) { t.PrefillISL = []float64{2, 2} }, []string{"prefill_isl[1]", "strictly increasing"}},
		{"negative axis", func(t *Table) { t.DecodeContextLength[0] = -1 }, []string{"decode_context_length[0]", "≥ 0"}},
		{"nan axis", func(t *Table) { t.DecodeActiveKVTokens[1] = math.NaN() }, []string{"decode_active_kv_tokens[1]", "finite"}},
		{"negative latency", func(t *Table) { t.PrefillTTFTMs[0] = -3 }, []string{"prefill_ttft_ms[0]", "≥ 0 ms"}},
		{"infinite latency", func(t *Table) { t.DecodeITLMs[1][2] = math.Inf(1) }, []string{"decode_itl[1][2]"}},
		{"missing decode axis", func(t *Table) { t.DecodeContextLength = nil }, []string{"decode_context_length", "empty"}},
		{"too few rows", func(t *Table) { t.DecodeITLMs = t.DecodeITLMs[:1] }, []string{"decode_itl has 1 rows", "decode_active_kv_tokens has 2"}},
		{"short row", func(t *Table) { t.DecodeITLMs[1] = []float64{1, 2} }, []string{"decode_itl row 1 has 2", "decode_context_length has 3"}},
		{"transposed grid", func(t *Table) { t.DecodeITLMs = [][]float64{{1, 4}, {2, 5}, {3, 6}} }, []string{"decode_itl has 3 rows"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			table := good()
			c.modify(&table)
			_, err := NewInterpolated(table)
			require.Error(t, err)
			for _, s := range c.says {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestLoadInterpolated_FileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	cases := []struct {
		name string
		path string
		says []string
	}{
		{"missing file", filepath.Join(dir, "nope.json"), []string{"profile table", "nope.json"}},
		{"not JSON", write("bad.json", "prefill"), []string{"bad.json", "decode JSON"}},
		{"unknown key", write("typo.json", `{"prefill_isl":[1],"prefill_ttft":[1]}`), []string{"typo.json", "prefill_ttft", "decode_itl"}},
		{"trailing data", write("two.json", `{} {}`), []string{"two.json", "after the table"}},
		{"invalid table", write("empty.json", `{}`), []string{"empty.json", "prefill_isl is empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadInterpolated(c.path)
			require.Error(t, err)
			for _, s := range c.says {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestFromProfile(t *testing.T) {
	t.Parallel()
	m, err := FromProfile("")
	require.NoError(t, err)
	assert.Equal(t, Polynomial{}, m)

	m, err = FromProfile(exampleProfile)
	require.NoError(t, err)
	require.IsType(t, &Interpolated{}, m)
	assert.InDelta(t, 30.0, m.PrefillMs(1, 320, 0), 1e-9)

	// No silent fallback to the polynomial model.
	m, err = FromProfile(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
	assert.Nil(t, m)
}

func BenchmarkInterpolated_DecodeMs(b *testing.B) {
	m, err := LoadInterpolated(exampleProfile)
	require.NoError(b, err)
	for i := 0; b.Loop(); i++ {
		_ = m.DecodeMs(8, float64(i%12000), 0, float64(i%1500))
	}
}

func BenchmarkInterpolated_PrefillMs(b *testing.B) {
	m, err := LoadInterpolated(exampleProfile)
	require.NoError(b, err)
	for i := 0; b.Loop(); i++ {
		_ = m.PrefillMs(2, float64(i%4096), 0)
	}
}

func BenchmarkPolynomial_DecodeMs(b *testing.B) {
	var p Polynomial
	for i := 0; b.Loop(); i++ {
		_ = p.DecodeMs(8, float64(i%12000), 12000, 0)
	}
}
