package cluster

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heard collects the tokens OnToken reports for one request.
type heard struct {
	mu    sync.Mutex
	index []int
	at    []float64
}

func (h *heard) on(i int, at float64) {
	h.mu.Lock()
	h.index = append(h.index, i)
	h.at = append(h.at, at)
	h.mu.Unlock()
}

// TestOnToken_EveryTokenBeforeTheResult: with StreamTokens a request hears
// each of its tokens once, in order, at non-decreasing modeled times from
// its first token to its last, before Generate returns — aggregated and
// disaggregated alike.
func TestOnToken_EveryTokenBeforeTheResult(t *testing.T) {
	t.Parallel()
	fast := map[string]any{"speedup_ratio": 1000}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"aggregated", Config{Args: fast, StreamTokens: true}},
		{"vllm-disagg", Config{Disagg: true, Args: fast, StreamTokens: true}},
		{"sglang-disagg", Config{Engine: "sglang", Disagg: true, Args: fast, StreamTokens: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := start(t, tc.cfg)
			reqs := make([]Request, 4)
			hs := make([]*heard, len(reqs))
			for i := range reqs {
				hs[i] = &heard{}
				reqs[i] = Request{PromptTokens: 40 + 10*i, MaxTokens: 5 + i, OnToken: hs[i].on}
			}
			res := runAll(c, reqs)
			for i, r := range res {
				require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
				h := hs[i]
				want := make([]int, reqs[i].MaxTokens)
				for k := range want {
					want[k] = k
				}
				assert.Equal(t, want, h.index, "request %d", i)
				for k := 1; k < len(h.at); k++ {
					assert.LessOrEqual(t, h.at[k-1], h.at[k], "request %d token %d", i, k)
				}
				assert.InDelta(t, r.E2EMs-r.TTFTMs, h.at[len(h.at)-1]-h.at[0], 1e-6, "request %d: first to last token", i)
			}
		})
	}
}

// TestOnToken_FirstTokenOnlyWithoutStreamTokens: without StreamTokens the
// workers report first tokens alone, and so does OnToken.
func TestOnToken_FirstTokenOnlyWithoutStreamTokens(t *testing.T) {
	t.Parallel()
	c := start(t, Config{Args: map[string]any{"speedup_ratio": 1000}})
	h := &heard{}
	r := c.Generate(t.Context(), Request{PromptTokens: 32, MaxTokens: 6, OnToken: h.on})
	require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
	assert.Equal(t, []int{0}, h.index)
}

// TestRunVirtual_RefusesOnToken: RunVirtual never calls OnToken, so an
// arrival asking for its tokens is refused before anything runs rather
// than left unheard.
func TestRunVirtual_RefusesOnToken(t *testing.T) {
	t.Parallel()
	arrivals := []Arrival{
		{AtMs: 0, Request: Request{PromptTokens: 32, MaxTokens: 4}},
		{AtMs: 5, Request: Request{PromptTokens: 32, MaxTokens: 4, OnToken: func(int, float64) {}}},
	}
	_, err := RunVirtual(Config{}, arrivals, VirtualOptions{})
	require.ErrorContains(t, err, "arrivals[1]: RunVirtual reports results, not tokens")
}
