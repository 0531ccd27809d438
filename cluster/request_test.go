package cluster

import (
	"context"
	"fmt"
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

// refTokens is fillTokens written the plain way: halves of the stream's
// draws in order, low half first, each turned into an id by Lemire's
// multiply and skipped when its product would bias the ids.
func refTokens(n int, g tokenStream) []uint32 {
	var halves []uint32
	out := make([]uint32, 0, n)
	for len(out) < n {
		if len(halves) == 0 {
			x := g.next()
			halves = append(halves, uint32(x), uint32(x>>32))
		}
		h := halves[0]
		halves = halves[1:]
		m := uint64(h) * vocabSize
		if uint32(m) >= uint32((1<<32)%vocabSize) {
			out = append(out, uint32(m>>32))
		}
	}
	return out
}

// TestFillTokens_SameAsDrawingOneHalfAtATime: the prompt filler gives
// the plain draw's ids for any seeds and length, including across a half
// it must skip (a stream found to have one early).
func TestFillTokens_SameAsDrawingOneHalfAtATime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := newTokenStream(rapid.Uint64().Draw(t, "s1"), rapid.Uint64().Draw(t, "s2"))
		got := make([]uint32, rapid.IntRange(0, 4096).Draw(t, "n"))
		want := refTokens(len(got), g)
		fillTokens(got, &g)
		require.Equal(t, want, got)
	})
	const thresh = (1 << 32) % vocabSize
	for seed := uint64(0); ; seed++ {
		g := newTokenStream(seed, 0)
		skips := false
		for range 4 { // a skipped half within the first eight tokens
			x := g.next()
			if uint32(uint64(uint32(x))*vocabSize) < thresh || uint32((x>>32)*vocabSize) < thresh {
				skips = true
			}
		}
		if !skips {
			continue
		}
		g = newTokenStream(seed, 0)
		got := make([]uint32, 9)
		want := refTokens(len(got), g)
		fillTokens(got, &g)
		require.Equal(t, want, got, "seed %d, whose stream has a half to skip", seed)
		return
	}
}

// TestFillTokens_UniformAndDistinctPerRequest: prompt ids cover the
// vocabulary evenly (a chi-square test over 64 buckets, of draws from a
// fixed seed), the same seeds give the same prompt, and no two requests
// of a run start with the same block of tokens.
func TestFillTokens_UniformAndDistinctPerRequest(t *testing.T) {
	g := newTokenStream(1, 2)
	ids := make([]uint32, 1<<20)
	fillTokens(ids, &g)
	var buckets [64]float64
	for _, id := range ids {
		require.Less(t, id, uint32(vocabSize))
		buckets[uint64(id)*64/vocabSize]++
	}
	want := float64(len(ids)) / 64 // 32000 is a multiple of 64: even buckets
	chi2 := 0.0
	for _, n := range buckets {
		chi2 += (n - want) * (n - want) / want
	}
	// 63 degrees of freedom: above 110 happens once in 10⁴ for a uniform source.
	assert.Less(t, chi2, 110.0, "chi-square over 64 buckets")

	seen := map[[16]uint32]uint64{}
	for seq := range uint64(20_000) {
		a := promptTokens(Request{PromptTokens: 16}, 9, seq)
		require.Equal(t, a, promptTokens(Request{PromptTokens: 16}, 9, seq), "request %d drawn twice", seq)
		k := [16]uint32(a)
		if prev, dup := seen[k]; dup {
			t.Fatalf("requests %d and %d have the same first block", prev, seq)
		}
		seen[k] = seq
	}
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

// TestRetiring_ReusesOnlyOnceTheClockHasPassed: storage a request is done
// with at an instant (its record, whose machine holds the Submit and
// Reserve it hands its workers, and its prompt) goes to no other request
// at that instant, when an input that reads it may still be queued, and
// comes back from the next instant on.
func TestRetiring_ReusesOnlyOnceTheClockHasPassed(t *testing.T) {
	var s retiring[request]
	a, b := s.take(0), s.take(0)
	require.NotSame(t, a, b)
	s.retire(5, a)
	s.retire(5, b)
	c := s.take(5)
	require.True(t, c != a && c != b, "storage retired at 5 ms handed out again at 5 ms")
	s.retire(5, c)
	got := []*request{s.take(5.25), s.take(5.25), s.take(5.25)}
	require.ElementsMatch(t, []*request{a, b, c}, got, "what was retired at 5 ms is spare at 5.25 ms")
	require.True(t, !slices.Contains(got, s.take(5.25)), "nothing is handed out twice")
	s.retire(6, got[0])
	s.retire(7, got[1])
	require.Same(t, got[0], s.take(7), "retired at 6 ms, spare at 7 ms")
	require.NotSame(t, got[1], s.take(7), "retired at 7 ms, not yet spare")
}
