package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// g2Args is smallArgs(8) with a host tier of g2 blocks, 1 MB of KV per
// token and bw GB/s back to the GPU: a 4-token block onboards in 4/bw ms.
func g2Args(g2 int, bw float64) Args {
	return smallArgs(8, func(a *Args) {
		a.NumG2Blocks = g2
		a.KVBytesPerToken = intp(1_000_000)
		a.BandwidthG2ToG1 = new(bw)
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

func tierOrder(t *hostTier) []kv.SeqHash {
	var out []kv.SeqHash
	for s := t.head; s != noSlot; s = t.next[s] {
		out = append(out, t.hash[s])
	}
	return out
}

// TestVLLM_G2KVEventsPerMedium rebuilds the GPU pool's and the host tier's
// block sets from the worker's KV events alone and checks them against the
// pool and the tier: a block the GPU pool evicts into the tier is removed
// from GPU and stored on CPU, a block the tier drops is removed from CPU,
// and an onboarded block is stored on GPU again. Each medium numbers its
// events from 0 without gaps.
func TestVLLM_G2KVEventsPerMedium(t *testing.T) {
	// Four prompts of 5 blocks cycle through an 8-block pool over a
	// 16-block tier, which onboards them; then fresh prompts make the tier
	// drop blocks.
	w := newWorker(t, g2Args(16, 8))
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
	require.Positive(t, m.G2Onboarded)
	require.Greater(t, m.G2Offloaded, uint64(m.G2Capacity), "the tier dropped blocks")

	sets := map[kv.Medium]map[kv.SeqHash]bool{kv.MediumGPU: {}, kv.MediumCPU: {}}
	next := map[kv.Medium]uint64{}
	counts := map[kv.Medium]map[kv.EventKind]int{kv.MediumGPU: {}, kv.MediumCPU: {}}
	for _, e := range r.kvEvents {
		require.Contains(t, sets, e.Medium)
		require.Equal(t, next[e.Medium], e.ID, "%s event ids run from 0 without gaps", e.Medium)
		next[e.Medium]++
		counts[e.Medium][e.Kind]++
		set := sets[e.Medium]
		switch e.Kind {
		case kv.Stored:
			if e.Medium == kv.MediumCPU {
				assert.False(t, e.HasParent, "a CPU Stored event names no parent")
			}
			for _, b := range e.Blocks {
				require.False(t, set[b.Hash], "%s stores %x twice", e.Medium, b.Hash)
				if e.Medium == kv.MediumCPU {
					require.False(t, sets[kv.MediumGPU][b.Hash], "block %x offloaded while on the GPU", b.Hash)
				}
				set[b.Hash] = true
			}
		case kv.Removed:
			for _, h := range e.RemovedHashes {
				require.True(t, set[h], "%s removes %x it does not hold", e.Medium, h)
				delete(set, h)
			}
		default:
			t.Fatalf("unexpected event kind %s", e.Kind)
		}
	}
	for _, k := range []kv.EventKind{kv.Stored, kv.Removed} {
		assert.Positive(t, counts[kv.MediumGPU][k], "GPU %s events", k)
		assert.Positive(t, counts[kv.MediumCPU][k], "CPU %s events", k)
	}

	gpu := w.CachedBlocks()
	assert.Len(t, sets[kv.MediumGPU], len(gpu))
	for _, h := range gpu {
		assert.True(t, sets[kv.MediumGPU][h], "GPU block %x not announced", h)
	}
	tier := w.HostBlocks()
	assert.Equal(t, tierOrder(w.sched.(*VLLM).pool.g2), tier)
	assert.Len(t, sets[kv.MediumCPU], len(tier))
	for _, h := range tier {
		assert.True(t, sets[kv.MediumCPU][h], "host tier block %x not announced", h)
	}
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
