package kv

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHash_InPlaceMatchesPortable: hashing the ids where they lie gives the
// hash of their little-endian copy, whatever the block's length.
func TestHash_InPlaceMatchesPortable(t *testing.T) {
	t.Parallel()
	x := uint32(2463534242)
	for _, n := range []int{0, 1, 3, 16, 64, 65, 100} {
		tokens := make([]uint32, n)
		for i := range tokens {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			tokens[i] = x
		}
		assert.Equal(t, hashTokensPortable(tokens), HashTokens(tokens), "%d tokens", n)
	}
}

func TestRunMemo_KeepsARunSeenTwice(t *testing.T) {
	t.Parallel()
	toks := make([]uint32, 0, 40*16)
	for id := range 4 {
		for range 10 * 16 {
			toks = append(toks, uint32(id))
		}
	}
	wantL, wantS := BlockHashes(toks, 16, nil, nil)
	var m RunMemo
	for i := range 3 {
		l, s := m.Extend(toks, 16, nil, nil)
		if !slices.Equal(l, wantL) || !slices.Equal(s, wantS) {
			t.Fatalf("call %d: hashes differ from BlockHashes", i)
		}
		// Four runs: the first (after its first block) and three more.
		if want := []int{0, 4, 4}[i]; m.runs.Len() != want {
			t.Fatalf("after call %d the memo keeps %d runs, want %d", i, m.runs.Len(), want)
		}
	}
}
