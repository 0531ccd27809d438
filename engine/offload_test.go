package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// g2Args is smallArgs(8) with a host tier of g2 blocks, 1 MB of KV per
// token and bw GB/s back to the GPU: a 4-token block onboards in 4/bw ms.
// The copy down takes no time (bandwidth_g1_to_g2_gbps 0), so an evicted
// block is in the tier at once and its GPU slot free: the timed copy, and
// the slot it holds, are offloadlink_test.go's.
func g2Args(g2 int, bw float64) Args {
	return smallArgs(8, func(a *Args) {
		a.NumG2Blocks = g2
		a.KVBytesPerToken = intp(1_000_000)
		a.BandwidthG2ToG1 = new(bw)
		a.BandwidthG1ToG2 = new(0.0)
	})
}

// evictThenReturn runs prompt P, then a prompt that takes the whole
// 8-block pool (so P's blocks are evicted from it), then P again, and
// returns the record and P's second completion.
func evictThenReturn(t *testing.T, a Args) (*record, Completion, *Worker) {
	t.Helper()
	w := newWorker(t, a)
	var r record
	p := seqTokens(100, 17) // 4 full blocks and one token
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: p, MaxTokens: 2}, Release))
	now := drive(t, w, &r, 0)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(5000, 29), MaxTokens: 2}, Release))
	now = drive(t, w, &r, now)
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: p, MaxTokens: 2}, Release))
	drive(t, w, &r, now)
	c, ok := r.completion(3)
	require.True(t, ok)
	return &r, c, w
}

func TestVLLM_G2ServesEvictedPrefix(t *testing.T) {
	_, off, wOff := evictThenReturn(t, smallArgs(8))
	assert.Equal(t, 0, off.CachedTokens, "without a host tier the evicted prefix is recomputed")
	assert.Zero(t, wOff.Metrics().G2Capacity)

	r, on, w := evictThenReturn(t, g2Args(32, 1))
	assert.Equal(t, 16, on.CachedTokens, "the 4 evicted blocks come back from G2")
	m := w.Metrics()
	assert.Equal(t, 32, m.G2Capacity)
	assert.EqualValues(t, 4, m.G2Onboarded)
	assert.GreaterOrEqual(t, m.G2Offloaded, uint64(4))
	assert.Equal(t, int(m.G2Offloaded), m.G2Blocks, "nothing dropped from a tier this large")

	// The onboarded blocks are stored in the GPU pool again: P's Stored
	// event after request 3 names them.
	var stored int
	for _, e := range r.kvEvents {
		for range e.Blocks {
			stored++
		}
	}
	assert.Positive(t, stored)

	// The copy costs 4 blocks × 4 ms on the pass that prefills request 3:
	// against free onboarding, TTFT rises by exactly that.
	_, free, _ := evictThenReturn(t, g2Args(32, 0))
	assert.Equal(t, 16, free.CachedTokens)
	ttft := func(c Completion) float64 { return c.FirstTokenAt - c.Arrival }
	assert.InDelta(t, 16.0, ttft(on)-ttft(free), 1e-9)
	// And recomputing the prefix costs more than onboarding it for free.
	assert.Greater(t, ttft(off), ttft(free))
}

func TestVLLM_G2TierBoundedAndDropsLRU(t *testing.T) {
	// A 2-block tier keeps only the last two blocks evicted into it. The
	// GPU pool evicts a sequence's tail first, so those are P's first two
	// blocks: half of P's prefix onboards, the rest is recomputed.
	_, c, w := evictThenReturn(t, g2Args(2, 1))
	m := w.Metrics()
	assert.Equal(t, 2, m.G2Blocks)
	assert.Positive(t, m.G2Offloaded)
	assert.EqualValues(t, 2, m.G2Onboarded)
	assert.Equal(t, 8, c.CachedTokens)
}

// cycleRun sends n requests round-robin over k prompts sharing no blocks,
// each of 4 full blocks and a token, one at a time, and returns the cached
// tokens summed and the outputs serialized.
func cycleRun(t *testing.T, a Args, k, n int) (int, string) {
	t.Helper()
	w := newWorker(t, a)
	var r record
	now := 0.0
	for i := range n {
		p := seqTokens(uint32(1000*(i%k+1)), 17)
		require.NoError(t, w.Submit(now, Request{ID: uint64(i + 1), Tokens: p, MaxTokens: 3}, Release))
		now = drive(t, w, &r, now)
	}
	cached := 0
	for _, c := range r.completions {
		cached += c.CachedTokens
	}
	var sb strings.Builder
	for i := range r.outs {
		serialize(&sb, 0, &r.outs[i])
	}
	return cached, sb.String()
}

func TestVLLM_G2RaisesHitsOverWorkingSet(t *testing.T) {
	// Four prompts of 5 blocks each cycle through an 8-block pool: each
	// evicts the one before, so the GPU pool alone never hits.
	base, _ := cycleRun(t, smallArgs(8), 4, 16)
	with, out1 := cycleRun(t, g2Args(64, 8), 4, 16)
	assert.Equal(t, 0, base)
	assert.Equal(t, 12*16, with, "every prompt after the first round onboards its 4 blocks")
	_, out2 := cycleRun(t, g2Args(64, 8), 4, 16)
	assert.Equal(t, out1, out2, "the modeled run is deterministic")
}

func TestHostTier_LRU(t *testing.T) {
	tr := newHostTier(3)
	for h := range 5 {
		tr.put(kv.SeqHash(h + 1))
		require.NoError(t, tr.audit())
	}
	assert.Equal(t, 3, tr.len())
	assert.EqualValues(t, 5, tr.offloaded)
	assert.EqualValues(t, 2, tr.dropped)
	// 3, 4, 5 held: a run from 3 counts all three and refreshes them in
	// order, so 3 is the next to go.
	assert.Equal(t, 3, tr.run([]kv.SeqHash{3, 4, 5, 6}))
	assert.Equal(t, 0, tr.run([]kv.SeqHash{1, 3}))
	tr.put(5) // already held: refreshed, not counted
	assert.EqualValues(t, 5, tr.offloaded)
	tr.put(7)
	require.NoError(t, tr.audit())
	assert.Equal(t, 0, tr.run([]kv.SeqHash{3}), "3 was the least recently used")
	assert.Equal(t, 2, tr.run([]kv.SeqHash{4, 5}))
	assert.Equal(t, 1, tr.run([]kv.SeqHash{7}))
	assert.Equal(t, fmt.Sprint([]kv.SeqHash{4, 5, 7}), fmt.Sprint(tierOrder(tr)))
}

// TestHostTier_PinKeepsOrderAndBlocks: blocks a pass pins are not dropped
// to make room for what the same pass evicts into the tier, and a pass
// that then fails to schedule leaves them where they were in the LRU
// order; one that schedules them marks them used.
func TestHostTier_PinKeepsOrderAndBlocks(t *testing.T) {
	tr := newHostTier(4)
	for h := range 4 {
		tr.put(kv.SeqHash(h + 1))
	}
	run := []kv.SeqHash{1, 2, 9}
	n := tr.held(run)
	require.Equal(t, 2, n)
	tr.pin(run[:n])
	// The pass's allocation evicts three blocks into the full tier: the
	// unpinned 3 and 4 go, then the block just put, never 1 or 2.
	for _, h := range []kv.SeqHash{5, 6, 7} {
		added, dropped, didDrop := tr.put(h)
		require.True(t, added)
		require.True(t, didDrop)
		assert.NotContains(t, run[:n], dropped)
	}
	assert.Equal(t, fmt.Sprint([]kv.SeqHash{1, 2, 6, 7}), fmt.Sprint(tierOrder(tr)))
	tr.unpin(run[:n])
	require.NoError(t, tr.audit())
	assert.Equal(t, fmt.Sprint([]kv.SeqHash{1, 2, 6, 7}), fmt.Sprint(tierOrder(tr)),
		"a pass that read nothing leaves the order as it was")
	tr.pin(run[:n])
	tr.take(run[:n])
	require.NoError(t, tr.audit())
	assert.Equal(t, fmt.Sprint([]kv.SeqHash{6, 7, 1, 2}), fmt.Sprint(tierOrder(tr)))

	// A full tier whose every block is pinned takes nothing in.
	all := tierOrder(tr)
	tr.pin(all)
	added, _, didDrop := tr.put(99)
	assert.False(t, added)
	assert.False(t, didDrop)
	tr.unpin(all)
	require.NoError(t, tr.audit())
}

func tierOrder(t *hostTier) []kv.SeqHash {
	var out []kv.SeqHash
	for s := t.head; s != noSlot; s = t.next[s] {
		out = append(out, t.hash[s])
	}
	return out
}

// TestVLLM_TierKVEventsPerMedium rebuilds the GPU pool's and each lower
// tier's block set from the worker's KV events alone and checks them
// against the pool and the tiers: a block the GPU pool evicts into the host
// tier is removed from GPU and stored on CPU (and copied on to DISK and
// EXTERNAL when those tiers are on), a block a tier drops is removed from
// its medium, a block staged from disk or object storage is stored on CPU,
// and an onboarded block is stored on GPU again. Each medium numbers its
// events from 0 without gaps.
func TestVLLM_TierKVEventsPerMedium(t *testing.T) {
	for _, tc := range []struct {
		name string
		args Args
	}{
		{"G2", g2Args(16, 8)},
		{"G2 and G3", tierArgs(4, 24, false)},
		{"G2, G3 and G4", tierArgs(4, 12, true)},
		{"G2 and G4", tierArgs(4, 0, true)},
		{"G2, G3 and G4, copies timed", timedTierArgs(tierArgs(4, 12, true))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkTierEvents(t, tc.args)
		})
	}
}

// tierArgs is g2Args(g2, 8) with a disk tier of g3 blocks (0: none) and
// object storage when g4, staging at 2 GB/s from either.
func tierArgs(g2, g3 int, g4 bool) Args {
	a := g2Args(g2, 8)
	a.NumG3Blocks, a.EnableG4Storage = g3, g4
	a.BandwidthG3ToG2, a.BandwidthG4ToG2 = new(2.0), new(2.0)
	return a
}

// timedTierArgs is a with slow copies down the tiers, in batches of 2: 8 ms
// a 4 MB block into the host tier, 16 ms on to disk or object storage.
func timedTierArgs(a Args) Args {
	a.BandwidthG1ToG2 = new(0.5)
	a.BandwidthG2ToG3, a.BandwidthG2ToG4 = new(0.25), new(0.25)
	a.OffloadBatchSize = 2
	return a
}

func checkTierEvents(t *testing.T, a Args) {
	// Four prompts of 5 blocks cycle through an 8-block pool over the
	// tiers, which onboard them; then fresh prompts make the bounded
	// tiers drop blocks.
	w := newWorker(t, a)
	var r record
	now := 0.0
	for i := range 30 {
		seed := i%4 + 1
		if i >= 16 {
			seed = i
		}
		p := seqTokens(uint32(1000*seed), 17)
		require.NoError(t, w.Submit(now, Request{ID: uint64(i + 1), Tokens: p, MaxTokens: 3}, Release))
		now = drive(t, w, &r, now)
	}
	m := w.Metrics()
	require.Positive(t, m.G2Onboarded+m.G3Onboarded+m.G4Onboarded)
	require.Greater(t, m.G2Offloaded, uint64(m.G2Capacity), "the host tier dropped blocks")
	pool := w.sched.(*VLLM).pool
	media := []kv.Medium{kv.MediumGPU, kv.MediumCPU}
	if a.NumG3Blocks > 0 {
		require.Positive(t, m.G3Onboarded, "hits found on disk")
		require.Greater(t, m.G3Offloaded, uint64(m.G3Capacity), "the disk tier dropped blocks")
		media = append(media, kv.MediumDisk)
	}
	if a.EnableG4Storage {
		require.Positive(t, m.G4Onboarded, "hits found in object storage")
		media = append(media, kv.MediumExternal)
	}

	sets := map[kv.Medium]map[kv.SeqHash]bool{}
	counts := map[kv.Medium]map[kv.EventKind]int{}
	for _, m := range media {
		sets[m], counts[m] = map[kv.SeqHash]bool{}, map[kv.EventKind]int{}
	}
	next := map[kv.Medium]uint64{}
	for _, e := range r.kvEvents {
		require.Contains(t, sets, e.Medium)
		require.Equal(t, next[e.Medium], e.ID, "%s event ids run from 0 without gaps", e.Medium)
		next[e.Medium]++
		counts[e.Medium][e.Kind]++
		set := sets[e.Medium]
		switch e.Kind {
		case kv.Stored:
			if e.Medium != kv.MediumGPU {
				assert.False(t, e.HasParent, "a %s Stored event names no parent", e.Medium)
			}
			for _, b := range e.Blocks {
				require.False(t, set[b.Hash], "%s stores %x twice", e.Medium, b.Hash)
				if e.Medium != kv.MediumGPU {
					require.False(t, sets[kv.MediumGPU][b.Hash], "block %x stored on %s while on the GPU", b.Hash, e.Medium)
				}
				set[b.Hash] = true
			}
		case kv.Removed:
			require.NotEqual(t, kv.MediumExternal, e.Medium, "object storage drops nothing")
			for _, h := range e.RemovedHashes {
				require.True(t, set[h], "%s removes %x it does not hold", e.Medium, h)
				delete(set, h)
			}
		default:
			t.Fatalf("unexpected event kind %s", e.Kind)
		}
	}
	for _, m := range media {
		assert.Positive(t, counts[m][kv.Stored], "%s Stored events", m)
		if m != kv.MediumExternal {
			assert.Positive(t, counts[m][kv.Removed], "%s Removed events", m)
		}
	}

	gpu := w.CachedBlocks()
	assert.Len(t, sets[kv.MediumGPU], len(gpu))
	for _, h := range gpu {
		assert.True(t, sets[kv.MediumGPU][h], "GPU block %x not announced", h)
	}
	tier := w.HostBlocks()
	assert.Equal(t, tierOrder(pool.g2), tier)
	assert.Len(t, sets[kv.MediumCPU], len(tier))
	for _, h := range tier {
		assert.True(t, sets[kv.MediumCPU][h], "host tier block %x not announced", h)
	}
	if pool.g3 != nil {
		disk := tierOrder(pool.g3)
		assert.Equal(t, m.G3Blocks, len(disk))
		assert.Len(t, sets[kv.MediumDisk], len(disk))
		for _, h := range disk {
			assert.True(t, sets[kv.MediumDisk][h], "disk tier block %x not announced", h)
		}
	}
	if pool.g4 != nil {
		assert.Equal(t, m.G4Blocks, len(pool.g4.held))
		assert.Len(t, sets[kv.MediumExternal], len(pool.g4.held))
		for h := range pool.g4.held {
			assert.True(t, sets[kv.MediumExternal][h], "object storage block %x not announced", h)
		}
	}
}

func TestVLLM_G3ServesPrefixDroppedFromG2(t *testing.T) {
	// A 2-block host tier keeps the first two of P's blocks (the GPU pool
	// evicts a sequence's tail first); the disk tier got a copy of all
	// four as the host tier took them in, so the last two come from disk.
	_, g2Only, _ := evictThenReturn(t, g2Args(2, 1))
	assert.Equal(t, 8, g2Only.CachedTokens)

	a := g2Args(2, 1)
	a.NumG3Blocks, a.BandwidthG3ToG2 = 32, new(0.5)
	_, on, w := evictThenReturn(t, a)
	assert.Equal(t, 16, on.CachedTokens, "two blocks from G2, two staged from G3")
	m := w.Metrics()
	assert.EqualValues(t, 2, m.G2Onboarded)
	assert.EqualValues(t, 2, m.G3Onboarded)
	assert.Equal(t, 32, m.G3Capacity)
	assert.Positive(t, m.G3Blocks)
	assert.Zero(t, m.G4Blocks)

	// Each 4 MB block copies to the GPU in 4 ms at 1 GB/s, and the two
	// from disk are staged first at 0.5 GB/s, 8 ms each: 4×4 + 2×8 ms on
	// the pass that prefills P again, against free copies.
	free := g2Args(2, 0)
	free.NumG3Blocks, free.BandwidthG3ToG2 = 32, new(0.0)
	_, f, _ := evictThenReturn(t, free)
	assert.Equal(t, 16, f.CachedTokens)
	ttft := func(c Completion) float64 { return c.FirstTokenAt - c.Arrival }
	assert.InDelta(t, 32.0, ttft(on)-ttft(f), 1e-9)
}

func TestVLLM_G4ServesPrefixDroppedFromG2(t *testing.T) {
	a := g2Args(2, 1)
	a.EnableG4Storage, a.BandwidthG4ToG2 = true, new(0.25)
	_, on, w := evictThenReturn(t, a)
	assert.Equal(t, 16, on.CachedTokens, "two blocks from G2, two staged from object storage")
	m := w.Metrics()
	assert.EqualValues(t, 2, m.G4Onboarded)
	assert.Positive(t, m.G4Blocks)
	assert.Zero(t, m.G3Capacity)

	free := g2Args(2, 0)
	free.EnableG4Storage, free.BandwidthG4ToG2 = true, new(0.0)
	_, f, _ := evictThenReturn(t, free)
	ttft := func(c Completion) float64 { return c.FirstTokenAt - c.Arrival }
	// 4 blocks × 4 ms to the GPU, and 2 × 16 ms staged at 0.25 GB/s.
	assert.InDelta(t, 48.0, ttft(on)-ttft(f), 1e-9)
}

func TestVLLM_G3RaisesHitsOverG2(t *testing.T) {
	// Four prompts of 4 blocks cycle through an 8-block pool over an
	// 8-block host tier, which holds two of them: each prompt comes back
	// after the host tier has dropped it. A 64-block disk tier holds all
	// four.
	g2, _ := cycleRun(t, g2Args(8, 8), 4, 16)
	with, out1 := cycleRun(t, tierArgs(8, 64, false), 4, 16)
	assert.Greater(t, with, g2)
	assert.Equal(t, 12*16, with, "every prompt after the first round onboards its 4 blocks")
	_, out2 := cycleRun(t, tierArgs(8, 64, false), 4, 16)
	assert.Equal(t, out1, out2, "the modeled run is deterministic")
}

// TestVLLM_NoTierNoCPUEvents: without a host tier every event is the GPU
// pool's.
func TestVLLM_NoTierNoCPUEvents(t *testing.T) {
	r, _, _ := evictThenReturn(t, smallArgs(8))
	require.NotEmpty(t, r.kvEvents)
	for _, e := range r.kvEvents {
		assert.Equal(t, kv.MediumGPU, e.Medium)
	}
}

// TestVLLM_BlockedPassLeavesHostTierOrder: a request whose prefix is in
// the host tier but which a pass cannot schedule (chunked prefill off, its
// uncached prompt over the budget left) reads nothing from the tier, so
// the tier's LRU order is as it was; the pass that does schedule it marks
// its blocks used.
func TestVLLM_BlockedPassLeavesHostTierOrder(t *testing.T) {
	a := smallArgs(40, func(a *Args) {
		a.NumG2Blocks = 128
		a.EnableChunkedPrefill = false
		a.MaxNumBatchedTokens = intp(100)
	})
	w := newWorker(t, a)
	var r record
	p := seqTokens(100, 17) // 4 full blocks and one token
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: p, MaxTokens: 2}, Release))
	now := drive(t, w, &r, 0)
	// X then Y decode until each fills the pool: X evicts P into the
	// host tier, Y evicts X behind it.
	for i, base := range []uint32{5000, 6000} {
		require.NoError(t, w.Submit(now, Request{ID: uint64(2 + i), Tokens: seqTokens(base, 90), MaxTokens: 70}, Release))
		now = drive(t, w, &r, now)
	}
	g2 := w.sched.(*VLLM).pool.g2
	before := tierOrder(g2)
	require.Greater(t, len(before), 8)

	// A takes 90 of the 100-token budget; B, P and 24 more tokens, finds
	// P's 4 blocks in the host tier and has 24 to compute: blocked.
	require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: seqTokens(8000, 90), MaxTokens: 2}, Release))
	b := append(append([]uint32{}, p[:16]...), seqTokens(9000, 24)...)
	require.NoError(t, w.Submit(now, Request{ID: 5, Tokens: b, MaxTokens: 2}, Release))
	out := w.Step(now)
	require.NotNil(t, out)
	r.add(out)
	checkWorker(t, w)
	after := tierOrder(g2)
	var kept []kv.SeqHash
	for _, h := range after {
		if slices.Contains(before, h) {
			kept = append(kept, h)
		}
	}
	assert.Equal(t, before, kept, "the blocked pass left the host tier's order as it was")

	drive(t, w, &r, out.End)
	c, ok := r.completion(5)
	require.True(t, ok)
	assert.Equal(t, 16, c.CachedTokens, "the next pass onboards P's blocks")
	assert.EqualValues(t, 4, w.Metrics().G2Onboarded)
}
