package kv_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// runPrompt is a prompt of runs of equal blocks, as a trace's hash ids
// make: ids drawn from a few, so that runs repeat after equal prefixes,
// and a ragged tail of other tokens.
func runPrompt(rng *rand.Rand, blockSize int) []uint32 {
	var toks []uint32
	for range 1 + rng.IntN(6) {
		id := uint32(rng.IntN(8))
		n := blockSize * (1 + rng.IntN(40))
		if rng.IntN(4) == 0 {
			n += rng.IntN(blockSize) // a run that ends inside a block
		}
		for range n {
			toks = append(toks, id)
		}
	}
	for range rng.IntN(3 * blockSize) {
		toks = append(toks, 100+uint32(rng.IntN(3)))
	}
	return toks
}

func TestRunMemo_GivesExtendBlockHashes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 9))
	var m kv.RunMemo
	hits := 0
	for i := range 3000 {
		bs := []int{1, 4, 16, 64}[i%4]
		toks := runPrompt(rng, bs)
		wantL, wantS := kv.BlockHashes(toks, bs, nil, nil)
		// From a prefix's hashes, as a caller with a shared prefix has.
		k := 0
		if len(wantS) > 0 {
			k = rng.IntN(len(wantS) + 1)
		}
		gotL, gotS := m.Extend(toks, bs, append([]kv.LocalHash(nil), wantL[:k]...), append([]kv.SeqHash(nil), wantS[:k]...))
		require.Equal(t, wantL, gotL, "prompt %d, block size %d, from block %d", i, bs, k)
		require.Equal(t, wantS, gotS, "prompt %d, block size %d, from block %d", i, bs, k)
		if len(wantS) > 0 {
			hits++
		}
	}
	require.Positive(t, hits)
}

func TestRunMemo_ForgetsPastItsBound(t *testing.T) {
	t.Parallel()
	// Runs of distinct blocks, many more hashes than the memo keeps: the
	// answers stay right as it forgets.
	var m kv.RunMemo
	const bs = 2
	for i := range 3 * kv.RunMemoBlocks / 1000 {
		toks := make([]uint32, 0, 1000*bs)
		for range 1000 * bs {
			toks = append(toks, uint32(i))
		}
		wantL, wantS := kv.BlockHashes(toks, bs, nil, nil)
		gotL, gotS := m.Extend(toks, bs, nil, nil)
		require.Equal(t, wantL, gotL)
		require.Equal(t, wantS, gotS)
	}
}

func TestRunMemo_RefusesHashesThatAreNotThePrefixs(t *testing.T) {
	t.Parallel()
	var m kv.RunMemo
	require.Panics(t, func() { m.Extend(make([]uint32, 16), 16, nil, []kv.SeqHash{1}) })
	require.Panics(t, func() { m.Extend(make([]uint32, 16), 16, make([]kv.LocalHash, 2), make([]kv.SeqHash, 2)) })
}

func BenchmarkRunMemo_TracePrompt(b *testing.B) {
	// An 8k-token prompt of 16 trace blocks of 512 tokens, in 16-token
	// blocks: the memo against hashing every block.
	toks := make([]uint32, 0, 8192)
	for id := range 16 {
		for range 512 {
			toks = append(toks, uint32(id))
		}
	}
	var locals []kv.LocalHash
	var seqs []kv.SeqHash
	b.Run("memo", func(b *testing.B) {
		var m kv.RunMemo
		for b.Loop() {
			locals, seqs = m.Extend(toks, 16, locals[:0], seqs[:0])
		}
	})
	b.Run("hash", func(b *testing.B) {
		for b.Loop() {
			locals, seqs = kv.ExtendBlockHashes(toks, 16, locals[:0], seqs[:0])
		}
	})
}
