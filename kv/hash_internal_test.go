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

// TestChainHash_MatchesTheLibrary: the hash written out for 16 bytes is
// the library's XXH3 of them, for parents and locals of every shape
// (zero, all ones, single bits, random words).
func TestChainHash_MatchesTheLibrary(t *testing.T) {
	t.Parallel()
	words := []uint64{0, 1, ^uint64(0), 1 << 63, Seed, 0x8000000000000001}
	for b := range 64 {
		words = append(words, 1<<b, ^(uint64(1) << b))
	}
	x := uint64(0x9e3779b97f4a7c15)
	for range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		words = append(words, x)
	}
	for i, p := range words {
		for _, l := range []uint64{words[(i*7+3)%len(words)], words[(i*13+1)%len(words)], p} {
			if got, want := ChainHash(SeqHash(p), LocalHash(l)), chainHashLib(SeqHash(p), LocalHash(l)); got != want {
				t.Fatalf("ChainHash(%#x, %#x) = %#x, the library gives %#x", p, l, uint64(got), uint64(want))
			}
		}
	}
}

// BenchmarkChainHash chains a run of blocks as a prompt does, through
// ChainHash and through the library (the /lib case).
func BenchmarkChainHash(b *testing.B) {
	for _, c := range []struct {
		name string
		f    func(SeqHash, LocalHash) SeqHash
	}{{"written", ChainHash}, {"lib", chainHashLib}} {
		b.Run(c.name, func(b *testing.B) {
			h := SeqHash(1)
			for i := 0; b.Loop(); i++ {
				h = c.f(h, LocalHash(i))
			}
			if h == 0 {
				b.Log(h)
			}
		})
	}
}
