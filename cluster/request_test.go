package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/kv"
)

func TestRequest_ValidateMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxTokens int
		want      int    // the value after defaults, when valid
		err       string // a substring of the error, when not
	}{
		{"default", 0, DefaultMaxTokens, ""},
		{"one", 1, 1, ""},
		{"at the bound", MaxRequestMaxTokens, MaxRequestMaxTokens, ""},
		{"negative", -2, 0, "max_tokens"},
		{"above the bound", MaxRequestMaxTokens + 1, 0, "max_tokens: want an integer in [1, 16777216], got 16777217"},
		{"huge", 1 << 62, 0, "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{PromptTokens: 8, MaxTokens: tc.maxTokens}
			err := r.validate()
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.MaxTokens)
		})
	}
}

// TestGenerate_PromptLongerThanAnyWorkerIsRefusedFirst: a prompt no worker
// of the entry pool can hold is refused before a single token is drawn,
// naming the limit; one that fits goes to the engine as usual.
func TestGenerate_PromptLongerThanAnyWorkerIsRefusedFirst(t *testing.T) {
	c := start(t, Config{Disagg: true, Prefill: PoolConfig{Args: map[string]any{"num_gpu_blocks": 64}}})
	res := c.Generate(context.Background(), Request{PromptTokens: 64*16 + 1, MaxTokens: 2})
	assert.Equal(t, OutcomeRejected, res.Outcome)
	assert.Contains(t, res.Error, "prompt of 1025 tokens is longer than any prefill worker holds (1024 tokens")
	st := c.Stats()
	assert.Equal(t, uint64(1), st.Requests)
	assert.Equal(t, uint64(1), st.Rejected, "counted as refused")
	ok := c.Generate(context.Background(), Request{PromptTokens: 512, MaxTokens: 2})
	assert.Equal(t, OutcomeCompleted, ok.Outcome, ok.Error)
}

// TestHashMemo_HashesASharedPromptOnce: a token slice seen a second time
// is hashed once for keeps, with exactly the hashes of BlockHashes; a
// slice seen once, or a memo that is off, hands the hashing back.
func TestHashMemo_HashesASharedPromptOnce(t *testing.T) {
	t.Parallel()
	tokens := promptTokens(Request{PromptTokens: 100}, 1, 1)
	wantL, wantS := kv.BlockHashes(tokens, 16, nil, nil)

	var off hashMemo
	assert.Nil(t, off.lookup(tokens, 16), "off")

	m := hashMemo{byTokens: map[tokensKey]*kv.Hashes{}}
	assert.Nil(t, m.lookup(tokens, 16), "first arrival")
	hs := m.lookup(tokens, 16)
	require.NotNil(t, hs, "second arrival")
	assert.Equal(t, wantL, hs.Locals)
	assert.Equal(t, wantS, hs.Seqs)
	assert.Same(t, hs, m.lookup(tokens, 16), "kept")
	assert.Nil(t, m.lookup(tokens[:50], 16), "another slice of the same tokens is another prompt")
}

// TestFillTokens_DrawsWhatIntNDraws: the prompt filler's inlined draw is
// math/rand/v2's IntN(vocabSize), token for token, for any seed.
func TestFillTokens_DrawsWhatIntNDraws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s1, s2 := rapid.Uint64().Draw(t, "s1"), rapid.Uint64().Draw(t, "s2")
		got := make([]uint32, rapid.IntRange(0, 4096).Draw(t, "n"))
		fillTokens(got, rand.NewPCG(s1, s2))
		g := rand.New(rand.NewPCG(s1, s2))
		for i, v := range got {
			if want := uint32(g.IntN(vocabSize)); v != want {
				t.Fatalf("token %d: %d, IntN draws %d", i, v, want)
			}
		}
	})
}

// TestPrefixMemo_SameTokensAndHashesAsDrawingThem checks the memo against
// drawing every prompt afresh, through its eviction (more prefixes than it
// keeps, revisited) and the prompts it does not serve (explicit tokens,
// no prefix, a prefix past its bound).
func TestPrefixMemo_SameTokensAndHashesAsDrawingThem(t *testing.T) {
	var m prefixMemo
	var buf []uint32
	reqs := []Request{
		{PromptTokens: 100},
		{PromptTokens: 100, Prefix: "p", PrefixTokens: 0},
		{PromptTokens: 100, Prefix: "p", PrefixTokens: 100},
		{PromptTokens: prefixMemoTokens + 100, Prefix: "huge", PrefixTokens: prefixMemoTokens + 1},
		{Tokens: []uint32{7, 8, 9}, Prefix: "p", PrefixTokens: 2},
	}
	for i := range 3 * prefixMemoSize {
		n := 1 + (i*37)%300
		reqs = append(reqs, Request{PromptTokens: n + (i*11)%200, Prefix: fmt.Sprintf("user-%d", i%(prefixMemoSize+7)), PrefixTokens: n})
	}
	for seq, r := range reqs {
		want := promptTokens(r, 9, uint64(seq))
		var e *prefixEntry
		buf, e = m.prompt(buf[:0], r, 9, uint64(seq), 16)
		require.Equal(t, want, buf, "request %d %+v", seq, r)
		served := len(r.Tokens) == 0 && r.Prefix != "" && r.PrefixTokens > 0 && r.PrefixTokens <= prefixMemoTokens
		require.Equal(t, served, e != nil, "request %d: memo used", seq)
		if e != nil {
			locals, seqs := kv.BlockHashes(want[:r.PrefixTokens], 16, nil, nil)
			require.True(t, slices.Equal(locals, e.locals), "request %d: prefix local hashes", seq)
			require.True(t, slices.Equal(seqs, e.seqs), "request %d: prefix sequence hashes", seq)
		}
	}
	assert.Len(t, m.entries, prefixMemoSize, "bounded")
	assert.Len(t, m.byKey, prefixMemoSize)
}
