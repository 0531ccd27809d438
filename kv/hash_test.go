package kv_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/kvstrand/mocker/kv"
)

// le32 and le64 write the documented byte layout by hand, independently of
// the package's encoding code.
func le32(vals ...uint32) []byte {
	out := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return out
}

func le64(vals ...uint64) []byte {
	out := make([]byte, 0, 8*len(vals))
	for _, v := range vals {
		for i := 0; i < 8; i++ {
			out = append(out, byte(v>>(8*i)))
		}
	}
	return out
}

func TestHash_LocalMatchesDocumentedLayout(t *testing.T) {
	t.Parallel()
	cases := [][]uint32{
		{1, 2, 3, 4},
		{0},
		{0xffffffff, 0x01020304, 7, 1000, 1999, 42, 0, 9},
	}
	for _, toks := range cases {
		want := xxh3.HashSeed(le32(toks...), 1337)
		assert.Equal(t, want, uint64(kv.HashTokens(toks)), "tokens %v", toks)
	}
	// A block larger than the stack buffer takes the heap path.
	big := make([]uint32, 300)
	for i := range big {
		big[i] = uint32(i * 7919)
	}
	assert.Equal(t, xxh3.HashSeed(le32(big...), 1337), uint64(kv.HashTokens(big)))
}

func TestHash_ChainMatchesDocumentedLayout(t *testing.T) {
	t.Parallel()
	parent, local := uint64(0x1122334455667788), uint64(0x99aabbccddeeff00)
	want := xxh3.HashSeed(le64(parent, local), 1337)
	assert.Equal(t, want, uint64(kv.ChainHash(kv.SeqHash(parent), kv.LocalHash(local))))
}

func TestHash_BlockHashesChainsFullBlocksOnly(t *testing.T) {
	t.Parallel()
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	locals, seqs := kv.BlockHashes(toks, 4, nil, nil)
	require.Len(t, locals, 2, "the partial tail block (9, 10) is not hashed")
	require.Len(t, seqs, 2)

	h0 := xxh3.HashSeed(le32(1, 2, 3, 4), 1337)
	h1 := xxh3.HashSeed(le32(5, 6, 7, 8), 1337)
	s1 := xxh3.HashSeed(le64(h0, h1), 1337)
	assert.Equal(t, h0, uint64(locals[0]))
	assert.Equal(t, h1, uint64(locals[1]))
	assert.Equal(t, h0, uint64(seqs[0]), "block 0's sequence hash is its local hash")
	assert.Equal(t, s1, uint64(seqs[1]))
}

func TestHash_SamePrefixSameSequenceHash(t *testing.T) {
	t.Parallel()
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	b := []uint32{1, 2, 3, 4, 9, 9, 9, 9}
	c := []uint32{0, 2, 3, 4, 5, 6, 7, 8}
	_, sa := kv.BlockHashes(a, 4, nil, nil)
	_, sb := kv.BlockHashes(b, 4, nil, nil)
	la, sc := kv.BlockHashes(c, 4, nil, nil)
	assert.Equal(t, sa[0], sb[0])
	assert.NotEqual(t, sa[1], sb[1])
	assert.NotEqual(t, sa[1], sc[1], "a different first block changes every later sequence hash")
	assert.Equal(t, kv.HashTokens(a[4:8]), la[1], "but not the local hash of an identical block")
}

func TestHash_BlockHashesAppendsAndIgnoresBadBlockSize(t *testing.T) {
	t.Parallel()
	l, s := kv.BlockHashes([]uint32{1, 2}, 0, nil, nil)
	assert.Empty(t, l)
	assert.Empty(t, s)
	pre := []kv.LocalHash{7}
	l, _ = kv.BlockHashes([]uint32{1, 2}, 2, pre, nil)
	require.Len(t, l, 2)
	assert.Equal(t, kv.LocalHash(7), l[0])
}

func TestEventKind_String(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "stored", kv.Stored.String())
	assert.Equal(t, "removed", kv.Removed.String())
	assert.Equal(t, "cleared", kv.Cleared.String())
	assert.Equal(t, "unknown", kv.EventKind(0).String())
}

func BenchmarkHashTokens16(b *testing.B) {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = kv.HashTokens(toks)
	}
}

func TestExtendBlockHashes_ContinuesAPrefixsHashes(t *testing.T) {
	tokens := make([]uint32, 16*7+5)
	for i := range tokens {
		tokens[i] = uint32(i*2654435761) % 50000
	}
	wantL, wantS := kv.BlockHashes(tokens, 16, nil, nil)
	for k := 0; k <= 7; k++ {
		l, s := kv.ExtendBlockHashes(tokens, 16, slices.Clone(wantL[:k]), slices.Clone(wantS[:k]))
		if !slices.Equal(l, wantL) || !slices.Equal(s, wantS) {
			t.Fatalf("from block %d: got %v %v, want %v %v", k, l, s, wantL, wantS)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("more hashes than blocks: no panic")
		}
	}()
	kv.ExtendBlockHashes(tokens[:16], 16, wantL[:2], wantS[:2])
}
