package kv

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestIndex_MatchesAMap: any sequence of additions and deletions, with
// hashes chosen to collide and wrap around the table, and growth from the
// zero value or a sized index, half or a quarter full at most, leaves the
// index answering every lookup as a map would, within its load.
func TestIndex_MatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x Index[int32]
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 1:
			x = NewIndex[int32](rapid.IntRange(0, 40).Draw(t, "size"))
		case 2:
			x = NewSparseIndex[int32](rapid.IntRange(0, 40).Draw(t, "size"))
		}
		maxLoad := 2
		if x.sparse {
			maxLoad = 4
		}
		want := map[SeqHash]int32{}
		// Eight homes, four at each end of a 16-entry table (and at the
		// ends of their halves as it grows), so probes collide and wrap.
		hashOf := func(home, tag uint64) SeqHash {
			if home >= 4 {
				home = 15 - (home - 4)
			}
			return SeqHash(home | tag<<32)
		}
		hash := rapid.Custom(func(t *rapid.T) SeqHash {
			return hashOf(rapid.Uint64Range(0, 7).Draw(t, "home"), rapid.Uint64Range(0, 7).Draw(t, "tag"))
		})
		for range rapid.IntRange(0, 200).Draw(t, "ops") {
			h := hash.Draw(t, "h")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				v := int32(rapid.IntRange(0, 1000).Draw(t, "v"))
				x.Put(h, v)
				want[h] = v
			case 1:
				p, added := x.Ref(h)
				_, had := want[h]
				require.Equal(t, !had, added)
				*p += 7
				want[h] += 7
			default:
				v, ok := x.Delete(h)
				wv, wok := want[h]
				require.Equal(t, wok, ok)
				require.Equal(t, wv, v)
				delete(want, h)
			}
			require.Equal(t, len(want), x.Len())
			inTable := x.Len()
			if x.hasZero {
				inTable-- // hash 0 is kept aside
			}
			require.GreaterOrEqual(t, len(x.entries), maxLoad*inTable, "load")
			for home := range uint64(8) {
				for tag := range uint64(8) {
					h := hashOf(home, tag)
					v, ok := x.Get(h)
					wv, wok := want[h]
					require.Equal(t, wok, ok, "hash %x", uint64(h))
					require.Equal(t, wv, v)
					if p := x.Lookup(h); wok {
						require.NotNil(t, p, "hash %x", uint64(h))
						require.Equal(t, wv, *p)
					} else {
						require.Nil(t, p, "hash %x", uint64(h))
					}
				}
			}
		}
		got := map[SeqHash]int32{}
		for h, v := range x.All() {
			got[h] = v
		}
		require.Equal(t, want, got)
		x.Clear()
		require.Zero(t, x.Len())
		_, ok := x.Get(hashOf(0, 0))
		require.False(t, ok)
	})
}
