package perf

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Expected values are worked out by hand from the formulas in the Polynomial
// doc comment; see the comment on each row.
// prefillCase is one hand-worked PrefillMs expectation, for any Model.
type prefillCase struct {
	name              string
	batch             int
	meanISL, meanPref float64
	want              float64
}

// checkPrefill runs each case as a parallel subtest of m.PrefillMs.
func checkPrefill(t *testing.T, m Model, cases []prefillCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.InDelta(t, c.want, m.PrefillMs(c.batch, c.meanISL, c.meanPref), 1e-9)
		})
	}
}

func TestPolynomial_PrefillMs(t *testing.T) {
	t.Parallel()
	checkPrefill(t, Polynomial{}, []prefillCase{
		// T=1000: 4.209989e-7·1e6 + 1.518344e-2·1000 + 16.50142 = 0.4209989 + 15.18344 + 16.50142
		{"one request of 1000 new tokens", 1, 1000, 0, 32.1058589},
		// T = 2·(600−100) = 1000, same as above.
		{"batch scales uncached tokens", 2, 600, 100, 32.1058589},
		// T=1: 4.209989e-7 + 0.01518344 + 16.50142
		{"one token pays the constant", 1, 1, 0, 16.5166038609989},
		// T=10000: 42.09989 + 151.8344 + 16.50142
		{"large prefill is quadratic", 1, 10000, 0, 210.43571},
		{"fully cached prompt is free", 1, 512, 512, 0},
		{"prefix beyond prompt is free", 1, 10, 20, 0},
		{"empty batch is free", 0, 1000, 0, 0},
	})
}

func TestPolynomial_DecodeMs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		batch         int
		active, total float64
		want          float64
	}{
		// u=0: 5.74
		{"empty pool", 1, 0, 1000, 5.74},
		// u=0.5: −25.74·0.25 + 54.01·0.5 + 5.74 = −6.435 + 27.005 + 5.74
		{"half full", 8, 500, 1000, 26.31},
		// u=1: −25.74 + 54.01 + 5.74
		{"full", 8, 1000, 1000, 34.01},
		{"over-full clamps to 1", 8, 2000, 1000, 34.01},
		{"unknown pool size counts as full", 8, 10, 0, 34.01},
		// u=0.25: −25.74·0.0625 + 54.01·0.25 + 5.74 = −1.60875 + 13.5025 + 5.74
		{"quarter full", 1, 250, 1000, 17.63375},
		{"no sequences", 0, 500, 1000, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Polynomial{}.DecodeMs(c.batch, c.active, c.total, 4096)
			assert.InDelta(t, c.want, got, 1e-9)
			if c.batch > 0 {
				assert.GreaterOrEqual(t, got, MinDecodeMs)
			}
		})
	}
}

func TestPolynomial_DecodeIgnoresContextLength(t *testing.T) {
	t.Parallel()
	p := Polynomial{}
	assert.Equal(t, p.DecodeMs(4, 300, 1000, 10), p.DecodeMs(4, 300, 1000, 1e6))
}

func TestPolynomial_Monotone(t *testing.T) {
	t.Parallel()
	p := Polynomial{}
	prev := 0.0
	for tok := 1.0; tok <= 1e6; tok *= 1.5 {
		got := p.PrefillMs(1, tok, 0)
		assert.Greater(t, got, prev, "prefill at %g tokens", tok)
		prev = got
	}
}
