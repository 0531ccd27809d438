package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/kv"
)

// TestBlockIndex_MatchesAMap: any sequence of puts and deletes, with
// hashes chosen to collide and wrap around the table, leaves the index
// answering every lookup as a map would.
func TestBlockIndex_MatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		blocks := rapid.IntRange(1, 40).Draw(t, "blocks")
		x := newBlockIndex(blocks)
		want := map[kv.SeqHash]int32{}
		// Eight homes, four at each end of the table, so probes collide
		// and wrap around.
		hashOf := func(home, tag uint64) kv.SeqHash {
			if home >= 4 {
				home = x.mask - (home - 4)
			}
			return kv.SeqHash(home | tag<<32)
		}
		hash := rapid.Custom(func(t *rapid.T) kv.SeqHash {
			return hashOf(rapid.Uint64Range(0, 7).Draw(t, "home"), rapid.Uint64Range(0, 5).Draw(t, "tag"))
		})
		for range rapid.IntRange(0, 200).Draw(t, "ops") {
			h := hash.Draw(t, "h")
			_, had := want[h]
			if rapid.Bool().Draw(t, "put") && !had && len(want) < blocks {
				s := int32(rapid.IntRange(0, blocks-1).Draw(t, "slot"))
				x.put(h, s)
				want[h] = s
			} else {
				x.del(h)
				delete(want, h)
			}
			require.Equal(t, len(want), x.len())
			for home := range uint64(8) {
				for tag := range uint64(6) {
					h := hashOf(home, tag)
					s, ok := x.get(h)
					ws, wok := want[h]
					require.Equal(t, wok, ok, "hash %x", uint64(h))
					if ok {
						require.Equal(t, ws, s)
					}
				}
			}
		}
		got := map[kv.SeqHash]int32{}
		for h, s := range x.all() {
			got[h] = s
		}
		require.Equal(t, want, got)
	})
}
