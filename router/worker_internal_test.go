package router

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/kv"
)

// TestRefs_MatchACountPerWorkerAndBlock: any sequence of refs and unrefs
// by a few workers over a few blocks (hash 0 among them, and hashes that
// share a home entry) leaves the block table holding exactly the
// (block, worker) pairs with references left, with their counts, and each
// worker's active blocks equal to the blocks it holds. An unref of a block
// the worker does not hold changes nothing.
func TestRefs_MatchACountPerWorkerAndBlock(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &Router{}
		ws := []*worker{{}, {}, {}}
		hashes := []kv.SeqHash{0, 1, 2, 1 << 40, 2<<40 | 1, 17, 33}
		want := map[kv.SeqHash]map[*worker]int32{}
		for range rapid.IntRange(0, 300).Draw(t, "ops") {
			w := ws[rapid.IntRange(0, len(ws)-1).Draw(t, "w")]
			h := hashes[rapid.IntRange(0, len(hashes)-1).Draw(t, "h")]
			if rapid.Bool().Draw(t, "ref") {
				r.ref(h, w)
				if want[h] == nil {
					want[h] = map[*worker]int32{}
				}
				want[h][w]++
			} else {
				r.unref(h, w)
				if want[h][w] > 0 {
					if want[h][w]--; want[h][w] == 0 {
						delete(want[h], w)
					}
				}
				if len(want[h]) == 0 {
					delete(want, h)
				}
			}
			require.Equal(t, len(want), r.blocks.Len())
			active := map[*worker]int{}
			for _, h := range hashes {
				e := r.blocks.Lookup(h)
				if want[h] == nil {
					require.Nil(t, e, "block %#x", uint64(h))
					continue
				}
				require.NotNil(t, e, "block %#x", uint64(h))
				got := map[*worker]int32{e.first.w: e.first.refs}
				for _, o := range e.more {
					_, dup := got[o.w]
					require.False(t, dup, "block %#x lists a worker twice", uint64(h))
					got[o.w] = o.refs
				}
				require.Equal(t, want[h], got, "block %#x", uint64(h))
				for w := range got {
					active[w]++
				}
			}
			for i, w := range ws {
				require.Equal(t, active[w], w.active, "worker %d", i)
			}
		}
	})
}
