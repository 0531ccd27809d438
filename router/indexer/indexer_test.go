package indexer

import (
	"maps"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/kv"
)

// chain returns the blocks of a sequence whose local hashes are locals, as a
// worker would name them.
func chain(locals ...kv.LocalHash) []kv.Block {
	out := make([]kv.Block, len(locals))
	var parent kv.SeqHash
	for i, l := range locals {
		s := kv.SeqHash(l)
		if i > 0 {
			s = kv.ChainHash(parent, l)
		}
		out[i] = kv.Block{Hash: s, TokensHash: l}
		parent = s
	}
	return out
}

func stored(blocks []kv.Block) kv.Event { return kv.Event{Kind: kv.Stored, Blocks: blocks} }

func storedAfter(parent kv.Block, blocks []kv.Block) kv.Event {
	return kv.Event{Kind: kv.Stored, Parent: parent.Hash, HasParent: true, Blocks: blocks}
}

func removed(blocks ...kv.Block) kv.Event {
	ev := kv.Event{Kind: kv.Removed}
	for _, b := range blocks {
		ev.RemovedHashes = append(ev.RemovedHashes, b.Hash)
	}
	return ev
}

// depths maps worker to depth for a query.
func depths(x *Indexer, q ...kv.LocalHash) map[uint64]int {
	out := map[uint64]int{}
	for _, s := range x.FindMatches(q, false, nil) {
		out[s.Worker] = s.Depth
	}
	return out
}

const (
	A kv.LocalHash = iota + 101
	B
	C
	D
	E
)

func TestIndexer_FindMatchesLongestPrefixPerWorker(t *testing.T) {
	t.Parallel()
	x := New()
	require.NoError(t, x.Apply(1, stored(chain(A, B, C))))
	require.NoError(t, x.Apply(2, stored(chain(A, B))))
	require.NoError(t, x.Apply(3, stored(chain(B, C))))

	tests := []struct {
		name  string
		query []kv.LocalHash
		want  map[uint64]int
	}{
		{"full prefix", []kv.LocalHash{A, B, C, D}, map[uint64]int{1: 3, 2: 2}},
		{"diverges after one", []kv.LocalHash{A, C}, map[uint64]int{1: 1, 2: 1}},
		{"other root", []kv.LocalHash{B, C, A}, map[uint64]int{3: 2}},
		{"no match", []kv.LocalHash{D}, map[uint64]int{}},
		{"empty query", nil, map[uint64]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, depths(x, tc.query...))
		})
	}
	scores := x.FindMatches([]kv.LocalHash{A, B}, false, nil)
	sizes := map[uint64]int{}
	for _, s := range scores {
		sizes[s.Worker] = s.TreeSize
	}
	assert.Equal(t, map[uint64]int{1: 3, 2: 2}, sizes)
}

func TestIndexer_StoredUnderParentExtendsPrefix(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C)
	require.NoError(t, x.Apply(1, stored(full[:1])))
	require.NoError(t, x.Apply(1, storedAfter(full[0], full[1:])))
	assert.Equal(t, map[uint64]int{1: 3}, depths(x, A, B, C))
	assert.Equal(t, 3, x.TreeSize(1))
}

func TestIndexer_StoredWithUnknownParentIsDropped(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C)
	require.NoError(t, x.Apply(2, stored(full[:1]))) // parent known to worker 2 only
	err := x.Apply(1, storedAfter(full[0], full[1:]))
	require.ErrorIs(t, err, ErrUnknownParent)
	assert.Equal(t, 0, x.TreeSize(1))
	assert.Equal(t, map[uint64]int{2: 1}, depths(x, A, B, C))
	assert.Equal(t, uint64(1), x.Stats().UnknownParent)
}

func TestIndexer_RemovedWithMissingHashesAppliesTheRest(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C)
	require.NoError(t, x.Apply(1, stored(full)))
	bogus := kv.Block{Hash: 999}
	err := x.Apply(1, removed(full[2], bogus))
	require.ErrorIs(t, err, ErrBlockNotFound)
	assert.Equal(t, map[uint64]int{1: 2}, depths(x, A, B, C))
	assert.Equal(t, 2, x.TreeSize(1))
	assert.Equal(t, uint64(1), x.Stats().MissingBlocks)
}

func TestIndexer_RemovedMiddleBlockCutsThePrefix(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C)
	require.NoError(t, x.Apply(1, stored(full)))
	require.NoError(t, x.Apply(1, removed(full[1])))
	assert.Equal(t, map[uint64]int{1: 1}, depths(x, A, B, C))
	// B stays as an empty node because C hangs below it.
	assert.Equal(t, 3, x.Stats().Nodes)
	// Storing B again under A restores the whole prefix.
	require.NoError(t, x.Apply(1, storedAfter(full[0], full[1:2])))
	assert.Equal(t, map[uint64]int{1: 3}, depths(x, A, B, C))
}

func TestIndexer_RemovingEverythingPrunesTheTree(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C)
	require.NoError(t, x.Apply(1, stored(full)))
	require.NoError(t, x.Apply(2, stored(full[:2])))
	require.NoError(t, x.Apply(1, removed(full[0], full[1], full[2])))
	assert.Equal(t, 2, x.Stats().Nodes, "worker 2's blocks remain")
	require.NoError(t, x.Apply(2, removed(full[1], full[0])))
	s := x.Stats()
	assert.Equal(t, 0, s.Nodes)
	assert.Equal(t, 0, s.IndexedBlocks)
}

func TestIndexer_ClearedEmptiesOneWorker(t *testing.T) {
	t.Parallel()
	x := New()
	require.NoError(t, x.Apply(1, stored(chain(A, B))))
	require.NoError(t, x.Apply(2, stored(chain(A))))
	require.NoError(t, x.Apply(1, kv.Event{Kind: kv.Cleared}))
	assert.Equal(t, map[uint64]int{2: 1}, depths(x, A, B))
	assert.Equal(t, 0, x.TreeSize(1))
	assert.Equal(t, 2, x.Stats().Workers, "a cleared worker stays known")
	require.NoError(t, x.Apply(1, stored(chain(A, B))))
	assert.Equal(t, map[uint64]int{1: 2, 2: 1}, depths(x, A, B))
}

func TestIndexer_RemoveWorkerForgetsItAndFreesItsSlot(t *testing.T) {
	t.Parallel()
	x := New()
	require.NoError(t, x.Apply(1, stored(chain(A, B))))
	require.NoError(t, x.Apply(2, stored(chain(A))))
	assert.True(t, x.RemoveWorker(1))
	assert.False(t, x.RemoveWorker(1))
	assert.Equal(t, map[uint64]int{2: 1}, depths(x, A, B))
	assert.Equal(t, 1, x.Stats().Nodes)
	// A new worker takes the freed slot and must not inherit anything.
	require.NoError(t, x.Apply(3, stored(chain(C))))
	assert.Equal(t, map[uint64]int{2: 1}, depths(x, A, B))
	assert.Equal(t, map[uint64]int{3: 1}, depths(x, C))
}

func TestIndexer_EarlyExitStopsAtOneWorker(t *testing.T) {
	t.Parallel()
	x := New()
	require.NoError(t, x.Apply(1, stored(chain(A, B, C, D))))
	require.NoError(t, x.Apply(2, stored(chain(A))))
	got := map[uint64]int{}
	for _, s := range x.FindMatches([]kv.LocalHash{A, B, C, D}, true, nil) {
		got[s.Worker] = s.Depth
	}
	assert.Equal(t, map[uint64]int{1: 2, 2: 1}, got, "the walk stops once worker 1 is alone")
	assert.Equal(t, map[uint64]int{1: 4, 2: 1}, depths(x, A, B, C, D))
}

func TestIndexer_MoreThan64Workers(t *testing.T) {
	t.Parallel()
	x := New()
	full := chain(A, B, C, D, E)
	want := map[uint64]int{}
	for id := uint64(0); id < 200; id++ {
		n := int(id%5) + 1
		require.NoError(t, x.Apply(id, stored(full[:n])))
		want[id] = n
	}
	assert.Equal(t, want, depths(x, A, B, C, D, E))
	for id := uint64(0); id < 200; id += 2 {
		require.NoError(t, x.Apply(id, removed(full[0])))
		delete(want, id)
	}
	assert.Equal(t, want, depths(x, A, B, C, D, E))
}

func TestIndexer_EventGapsCounted(t *testing.T) {
	t.Parallel()
	x := New()
	for _, id := range []uint64{0, 1, 2, 5, 6} {
		ev := stored(chain(kv.LocalHash(id + 1)))
		ev.ID = id
		require.NoError(t, x.Apply(1, ev))
	}
	ev := stored(chain(A))
	ev.DPRank = 1 // another rank's ids start over
	require.NoError(t, x.Apply(1, ev))
	assert.Equal(t, uint64(1), x.Stats().EventGaps)
}

// TestIndexer_MatchesModel checks FindMatches against a plain model over
// random Stored / Removed / Cleared / RemoveWorker sequences: a worker's
// depth is the longest query prefix whose every block it holds under some
// key. Some blocks get keys from a small shared set, so keys repeat
// positions and move between them.
func TestIndexer_MatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		x := New()
		model := map[uint64]map[kv.SeqHash][]kv.LocalHash{} // worker -> held block -> its path
		worker := rapid.Uint64Range(1, 4)
		local := rapid.SampledFrom([]kv.LocalHash{A, B, C, D})
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			w := worker.Draw(t, "worker")
			held := model[w]
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4: // store, under a held block or at the root
				var path []kv.LocalHash
				ev := kv.Event{Kind: kv.Stored}
				if len(held) > 0 && rapid.Bool().Draw(t, "withParent") {
					keys := sortedKeys(held)
					p := rapid.SampledFrom(keys).Draw(t, "parent")
					path = append(path, held[p]...)
					ev.Parent, ev.HasParent = p, true
				}
				for range rapid.IntRange(1, 3).Draw(t, "n") {
					path = append(path, local.Draw(t, "local"))
					b := chain(path...)[len(path)-1]
					if rapid.IntRange(0, 3).Draw(t, "freeKey") == 0 {
						// Engines name blocks as they like: a key may
						// repeat a position another key names, or move.
						b.Hash = rapid.SampledFrom([]kv.SeqHash{1001, 1002, 1003}).Draw(t, "key")
					}
					ev.Blocks = append(ev.Blocks, b)
				}
				// A block whose parent (the event's parent, or the block
				// before it) has its own hash is refused, event and all.
				self, prev, hasPrev := false, ev.Parent, ev.HasParent
				for _, b := range ev.Blocks {
					self = self || hasPrev && b.Hash == prev
					prev, hasPrev = b.Hash, true
				}
				if self {
					require.ErrorIs(t, x.Apply(w, ev), ErrSelfParent)
					break
				}
				require.NoError(t, x.Apply(w, ev))
				if held == nil {
					held = map[kv.SeqHash][]kv.LocalHash{}
					model[w] = held
				}
				for i, b := range ev.Blocks {
					held[b.Hash] = path[:len(path)-len(ev.Blocks)+i+1]
				}
			case 5, 6: // remove some held blocks, maybe with a bogus one
				ev := kv.Event{Kind: kv.Removed}
				for _, k := range sortedKeys(held) {
					if rapid.Bool().Draw(t, "drop") {
						ev.RemovedHashes = append(ev.RemovedHashes, k)
						delete(held, k)
					}
				}
				bogus := rapid.Bool().Draw(t, "bogus")
				if bogus {
					ev.RemovedHashes = append(ev.RemovedHashes, 7)
				}
				err := x.Apply(w, ev)
				if bogus {
					require.ErrorIs(t, err, ErrBlockNotFound)
				} else {
					require.NoError(t, err)
				}
			case 7:
				require.NoError(t, x.Apply(w, kv.Event{Kind: kv.Cleared}))
				if held != nil {
					model[w] = map[kv.SeqHash][]kv.LocalHash{}
				}
			case 8:
				x.RemoveWorker(w)
				delete(model, w)
			case 9: // a parent the worker does not hold
				ev := storedAfter(kv.Block{Hash: 12345}, chain(A))
				require.ErrorIs(t, x.Apply(w, ev), ErrUnknownParent)
			}
			q := rapid.SliceOfN(local, 0, 5).Draw(t, "query")
			want := map[uint64]int{}
			for id, held := range model {
				d := 0
				for d < len(q) && holdsPath(held, q[:d+1]) {
					d++
				}
				if d > 0 {
					want[id] = d
				}
			}
			require.Equal(t, want, depths(x, q...), "query %v", q)
			for id, held := range model {
				require.Equal(t, len(held), x.TreeSize(id))
			}
		}
	})
}

func sortedKeys(m map[kv.SeqHash][]kv.LocalHash) []kv.SeqHash {
	return slices.Sorted(maps.Keys(m))
}

// TestIndexer_TwoKeysOnOneNodeSurviveRemovalOfOne checks that a worker
// naming the same tree position with two block keys (same tokens, same
// parent, different block hash) keeps the position until both keys are
// removed, and that a pruned and recycled node is never reached through a
// stale key.
func TestIndexer_TwoKeysOnOneNodeSurviveRemovalOfOne(t *testing.T) {
	t.Parallel()
	x := New()
	require.NoError(t, x.Apply(1, stored([]kv.Block{{Hash: 1001, TokensHash: A}})))
	require.NoError(t, x.Apply(1, stored([]kv.Block{{Hash: 1002, TokensHash: A}})))
	assert.Equal(t, 2, x.TreeSize(1))

	require.NoError(t, x.Apply(1, removed(kv.Block{Hash: 1001})))
	assert.Equal(t, map[uint64]int{1: 1}, depths(x, A), "key 1002 still holds A")
	assert.Equal(t, 1, x.Stats().Nodes)

	require.NoError(t, x.Apply(1, stored(chain(B, C))))
	assert.Equal(t, map[uint64]int{1: 2}, depths(x, B, C))

	require.NoError(t, x.Apply(1, removed(kv.Block{Hash: 1002})))
	assert.Empty(t, depths(x, A), "the last key of A is gone")
	assert.Equal(t, map[uint64]int{1: 2}, depths(x, B, C), "removing A's key must not touch B")
	assert.Equal(t, 2, x.Stats().Nodes)
	assert.Equal(t, 2, x.TreeSize(1))
}

// TestIndexer_ClearAndRemoveWorkerWithTwoKeysOnOneNode checks that emptying
// a worker whose keys share a node releases the node exactly once.
func TestIndexer_ClearAndRemoveWorkerWithTwoKeysOnOneNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		empty func(x *Indexer)
	}{
		{"cleared", func(x *Indexer) { require.NoError(t, x.Apply(1, kv.Event{Kind: kv.Cleared})) }},
		{"removed worker", func(x *Indexer) { require.True(t, x.RemoveWorker(1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := New()
			for h := kv.SeqHash(1001); h <= 1003; h++ {
				require.NoError(t, x.Apply(1, stored([]kv.Block{{Hash: h, TokensHash: C}})))
			}
			require.NoError(t, x.Apply(2, stored(chain(A, B))))
			tc.empty(x)
			assert.Empty(t, depths(x, C))
			assert.Equal(t, map[uint64]int{2: 2}, depths(x, A, B))
			assert.Equal(t, 2, x.Stats().Nodes)
			assert.Equal(t, 2, x.Stats().IndexedBlocks)
		})
	}
}

// TestIndexer_HugeDPRankDoesNotAllocate checks that gap detection for a
// rank far above any real data-parallel size costs memory for that rank
// alone, not for every rank below it.
func TestIndexer_HugeDPRankDoesNotAllocate(t *testing.T) {
	// Not parallel: it reads the process-wide allocation counter.
	x := New()
	require.NoError(t, x.Apply(1, stored(chain(A))))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, rank := range []uint32{1 << 24, 1 << 24, 3} {
		ev := stored(chain(B))
		ev.ID, ev.DPRank = uint64(10*i), rank
		require.NoError(t, x.Apply(1, ev))
	}
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for three events")
	assert.Equal(t, uint64(1), x.Stats().EventGaps, "rank 1<<24 went from id 0 to 10")
}

// holdsPath reports whether some key in held names the block at path.
func holdsPath(held map[kv.SeqHash][]kv.LocalHash, path []kv.LocalHash) bool {
	for _, p := range held {
		if slices.Equal(p, path) {
			return true
		}
	}
	return false
}

// TestIndexer_NodeFillsOneCacheLine: a tree node is 64 bytes, so that a
// slab of them (a whole number of pages) starts every node on a line.
func TestIndexer_NodeFillsOneCacheLine(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(node{}))
	assert.Zero(t, slabSize*unsafe.Sizeof(node{})%4096, "a slab is whole pages")
}

// TestIndexer_ManyChildrenComeAndGo: a node with more children than fit
// inline, then than fit the list, finds each and loses each as its blocks
// go, in any order, down to an empty tree.
func TestIndexer_ManyChildrenComeAndGo(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, kidsInline, kidsInline + 5} {
		x := New()
		root := chain(A)[0]
		require.NoError(t, x.Apply(1, stored([]kv.Block{root})))
		kids := make([][]kv.Block, n)
		for i := range kids {
			kids[i] = chain(A, kv.LocalHash(1000+i))[1:]
			require.NoError(t, x.Apply(1, storedAfter(root, kids[i])))
		}
		for i := range kids {
			assert.Equal(t, map[uint64]int{1: 2}, depths(x, A, kv.LocalHash(1000+i)), "n=%d child %d", n, i)
		}
		// Remove the first, the last, then the rest: every path through
		// the inline child, the list and the map.
		order := append([]int{0, n - 1}, rangeInts(1, n-1)...)
		for k, i := range order {
			require.NoError(t, x.Apply(1, removed(kids[i]...)))
			assert.Equal(t, map[uint64]int{1: 1}, depths(x, A, kv.LocalHash(1000+i)), "n=%d child %d gone", n, i)
			for _, j := range order[k+1:] {
				assert.Equal(t, map[uint64]int{1: 2}, depths(x, A, kv.LocalHash(1000+j)), "n=%d child %d stays", n, j)
			}
		}
		require.NoError(t, x.Apply(1, removed(root)))
		assert.Zero(t, x.Stats().Nodes, "n=%d: the tree is empty", n)
	}
}

func rangeInts(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestIndexer_TierEventsKeepToTheirTier: an event of a tier below the GPU
// pool changes no match, no tree size and no GPU event count, and its event
// ids, numbered apart from the GPU pool's, are no gap in them. It goes to
// that tier's blocks, which continue the GPU match in TierRun.
func TestIndexer_TierEventsKeepToTheirTier(t *testing.T) {
	t.Parallel()
	on := func(m kv.Medium, ev kv.Event, id uint64) kv.Event {
		ev.Medium, ev.ID = m, id
		return ev
	}
	full := chain(A, B, C, D)
	seqs := []kv.SeqHash{full[0].Hash, full[1].Hash, full[2].Hash, full[3].Hash}
	x := New()
	require.NoError(t, x.Apply(1, on(kv.MediumGPU, stored(full[:2]), 0)))
	before := x.Stats()

	// Worker 1's tail went to its host tier (no parent, no token hashes,
	// as an engine announces it); worker 2 has blocks on its tiers only.
	tail := []kv.Block{{Hash: full[2].Hash}}
	require.NoError(t, x.Apply(1, on(kv.MediumCPU, stored(tail), 0)))
	require.NoError(t, x.Apply(1, on(kv.MediumDisk, stored([]kv.Block{{Hash: full[3].Hash}}), 0)))
	require.NoError(t, x.Apply(2, on(kv.MediumCPU, stored(full[:1]), 0)))
	require.NoError(t, x.Apply(2, on(kv.MediumExternal, stored(full[1:]), 0)))
	assert.Equal(t, map[uint64]int{1: 2}, depths(x, A, B, C, D), "tier events change no GPU match")
	assert.Equal(t, 2, x.TreeSize(1))
	assert.Equal(t, 0, x.TreeSize(2))
	after := x.Stats()
	assert.Equal(t, before.Events, after.Events, "tier events are not GPU events")
	assert.Equal(t, before.IndexedBlocks, after.IndexedBlocks)
	assert.Equal(t, uint64(4), after.TierEvents)
	assert.Equal(t, 6, after.TierBlocks)
	assert.True(t, x.HasTiers())

	// Worker 1: host block 2 continues its GPU blocks 0-1, disk block 3
	// continues the host run. Worker 2: host block 0 from the root, and
	// object storage takes over where the host run stops (no disk blocks).
	assert.Equal(t, [3]int{1, 1, 0}, x.TierRun(1, seqs, 2))
	assert.Equal(t, [3]int{1, 0, 3}, x.TierRun(2, seqs, 0))
	// A tier run must continue the GPU match: worker 1's host block 2 is
	// no continuation of a walk that stops at block 1.
	assert.Equal(t, [3]int{0, 0, 0}, x.TierRun(1, seqs, 1))
	assert.Equal(t, [3]int{0, 0, 0}, x.TierRun(3, seqs, 0), "unknown worker")

	// Removals take a tier's blocks away; its ids are its own.
	require.NoError(t, x.Apply(2, on(kv.MediumCPU, removed(full[0]), 1)))
	assert.Equal(t, [3]int{0, 0, 0}, x.TierRun(2, seqs, 0), "the walk starts at block 0, which no tier holds now")
	require.ErrorIs(t, x.Apply(2, on(kv.MediumCPU, removed(full[0]), 2)), ErrBlockNotFound)

	// The GPU removal is what takes a GPU block away, and its id follows
	// the GPU store's: no gap.
	require.NoError(t, x.Apply(1, on(kv.MediumGPU, removed(full[1]), 1)))
	assert.Equal(t, map[uint64]int{1: 1}, depths(x, A, B, C, D))
	assert.Zero(t, x.Stats().EventGaps)

	// Cleared on a tier empties that tier only; RemoveWorker empties all.
	require.NoError(t, x.Apply(1, kv.Event{Kind: kv.Cleared, Medium: kv.MediumDisk, ID: 1}))
	assert.Equal(t, 0, x.TierSize(1, kv.MediumDisk))
	assert.Equal(t, 1, x.TierSize(1, kv.MediumCPU))
	assert.Equal(t, 1, x.TreeSize(1))
	require.True(t, x.RemoveWorker(2))
	assert.Equal(t, 1, x.Stats().TierBlocks)
	require.True(t, x.RemoveWorker(1))
	assert.Zero(t, x.Stats().TierBlocks)
	assert.False(t, x.HasTiers())
}

// TestIndexer_TierConservation: over random Stored, Removed and Cleared
// events on every medium, each worker's tier holds exactly the blocks its
// events stored and did not remove, per medium; the counts in Stats add
// up; the GPU tree is what the GPU events alone build; and an index
// rebuilt from each tier's surviving blocks answers every TierRun the
// same.
func TestIndexer_TierConservation(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		const nBlocks = 12
		locals := make([]kv.LocalHash, nBlocks)
		for i := range locals {
			locals[i] = A + kv.LocalHash(i)
		}
		full := chain(locals...)
		seqs := make([]kv.SeqHash, nBlocks)
		for i, b := range full {
			seqs[i] = b.Hash
		}
		type key struct {
			w uint64
			m kv.Medium
		}
		model := map[key]map[kv.SeqHash]bool{}
		x, gpuOnly := New(), New()
		ids := map[key]uint64{}
		for range rapid.IntRange(0, 60).Draw(t, "events") {
			w := rapid.Uint64Range(1, 3).Draw(t, "worker")
			m := kv.Medium(rapid.IntRange(0, int(kv.NumMedia)-1).Draw(t, "medium"))
			k := key{w, m}
			lo := rapid.IntRange(0, nBlocks-1).Draw(t, "lo")
			hi := rapid.IntRange(lo+1, nBlocks).Draw(t, "hi")
			var ev kv.Event
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0, 1, 2:
				if m == kv.MediumGPU {
					ev = stored(full[lo:hi])
					if lo > 0 {
						ev = storedAfter(full[lo-1], full[lo:hi])
					}
				} else {
					ev = stored(full[lo:hi])
				}
			case 3, 4:
				ev = removed(full[lo:hi]...)
			default:
				ev = kv.Event{Kind: kv.Cleared}
			}
			ev.Medium, ev.ID = m, ids[k]
			ids[k]++
			err := x.Apply(w, ev)
			if m == kv.MediumGPU {
				_ = gpuOnly.Apply(w, ev)
				continue
			}
			if err != nil {
				assert.ErrorIs(t, err, ErrBlockNotFound)
			}
			set := model[k]
			if set == nil {
				set = map[kv.SeqHash]bool{}
				model[k] = set
			}
			switch ev.Kind {
			case kv.Stored:
				for _, b := range ev.Blocks {
					set[b.Hash] = true
				}
			case kv.Removed:
				for _, h := range ev.RemovedHashes {
					delete(set, h)
				}
			case kv.Cleared:
				clear(set)
			}
		}
		total := 0
		rebuilt := New()
		for k, set := range model {
			require.Equal(t, len(set), x.TierSize(k.w, k.m), "worker %d medium %s", k.w, k.m)
			total += len(set)
			var blocks []kv.Block
			for _, b := range full {
				if set[b.Hash] {
					blocks = append(blocks, kv.Block{Hash: b.Hash})
				}
			}
			if len(blocks) > 0 {
				require.NoError(t, rebuilt.Apply(k.w, kv.Event{Kind: kv.Stored, Medium: k.m, Blocks: blocks}))
			}
		}
		st := x.Stats()
		require.Equal(t, total, st.TierBlocks)
		require.Equal(t, total > 0, x.HasTiers())
		g := gpuOnly.Stats()
		require.Equal(t, g.IndexedBlocks, st.IndexedBlocks, "tier events leave the GPU tree alone")
		require.Equal(t, g.Nodes, st.Nodes)
		require.Equal(t, depths(gpuOnly, locals...), depths(x, locals...))
		for w := uint64(1); w <= 3; w++ {
			for from := 0; from <= nBlocks; from++ {
				require.Equal(t, rebuilt.TierRun(w, seqs, from), x.TierRun(w, seqs, from), "worker %d from %d", w, from)
			}
		}
		for w := uint64(1); w <= 3; w++ {
			x.RemoveWorker(w)
		}
		require.Zero(t, x.Stats().TierBlocks, "RemoveWorker drops every tier block")
	})
}
