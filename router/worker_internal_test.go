package router

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
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
		ws := []*worker{{slot: 0}, {slot: 1}, {slot: 2}}
		r := &Router{slots: ws}
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
				got := map[*worker]int32{r.slots[e.first.slot]: e.first.refs}
				var more []holder
				if e.more != 0 {
					more = r.mores[e.more-1]
				}
				for _, o := range more {
					w := r.slots[o.slot]
					_, dup := got[w]
					require.False(t, dup, "block %#x lists a worker twice", uint64(h))
					got[w] = o.refs
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

// TestRefs_RemovedWorkersSlotIsReused: a worker added after another's
// removal takes the freed slot; the block table, which names workers by
// slot, then counts the new worker's blocks apart from those still held by
// others on the same blocks, and freeing everything empties it.
func TestRefs_RemovedWorkersSlotIsReused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Mode, cfg.BlockSize = ModeRoundRobin, tbs
	r, err := New(cfg)
	require.NoError(t, err)
	add := func(id uint64) {
		require.NoError(t, r.AddWorker(WorkerInfo{ID: id, Role: RoleAggregated, TotalBlocks: 1000}))
	}
	active := func(id uint64) int {
		ws, ok := r.Worker(id)
		require.True(t, ok)
		return ws.ActiveBlocks
	}
	add(1)
	add(2)
	ids := map[string]uint64{}
	leases := map[string]Lease{}
	for _, id := range []string{"a", "b"} {
		w, l, err := r.RouteLease(prompt(id, 4, 0))
		require.NoError(t, err)
		ids[id], leases[id] = w, l
	}
	require.NotEqual(t, ids["a"], ids["b"], "round-robin spreads the two")
	require.Equal(t, 4, r.blocks.Len(), "both hold the same 4 blocks")
	gone := ids["a"]
	slot := r.workers[gone].slot
	require.True(t, r.RemoveWorker(gone))
	add(3)
	require.Equal(t, slot, r.workers[3].slot, "the freed slot is reused")
	assert.Zero(t, active(3))
	for i := 0; ; i++ {
		require.Less(t, i, 4, "round-robin reaches worker 3")
		id := fmt.Sprint("c", i)
		w, l, err := r.RouteLease(prompt(id, 6, 0))
		require.NoError(t, err)
		leases[id] = l
		if w == 3 {
			break
		}
		r.FreeLease(l)
	}
	assert.Equal(t, 6, active(3))
	assert.Equal(t, 4, active(ids["b"]))
	require.Equal(t, 6, r.blocks.Len())
	r.FreeLease(leases["b"])
	assert.Zero(t, active(ids["b"]))
	assert.Equal(t, 6, active(3))
	for i := range 4 {
		r.FreeLease(leases[fmt.Sprint("c", i)]) // a lease already freed is a no-op
	}
	assert.Zero(t, active(3))
	assert.Zero(t, r.blocks.Len())
}
