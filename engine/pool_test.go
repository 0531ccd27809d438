package engine

import (
	"slices"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// storedBlock allocates a block and stores it under hash h (no parent).
func storedBlock(t *testing.T, p *blockPool, h kv.SeqHash) int32 {
	t.Helper()
	s, ok := p.alloc()
	require.True(t, ok)
	p.store(s, h, kv.LocalHash(h))
	return s
}

func TestPool_EvictionOrderLRU(t *testing.T) {
	p := newBlockPool(3, true)
	a := storedBlock(t, p, 0xa)
	b := storedBlock(t, p, 0xb)
	c := storedBlock(t, p, 0xc)
	// Released in the order a, b, c: a is the least recently used.
	p.release(a)
	p.release(b)
	p.release(c)
	require.Equal(t, 3, p.inactive)
	// A prefix hit on a refreshes it: b becomes the oldest.
	p.acquire(a)
	p.release(a)
	p.ev.reset()

	_, ok := p.alloc()
	require.True(t, ok)
	_, ok = p.alloc()
	require.True(t, ok)
	evs := p.ev.flush(nil)
	require.Len(t, evs, 1, "consecutive evictions share one Removed event")
	assert.Equal(t, kv.Removed, evs[0].Kind)
	assert.Equal(t, []kv.SeqHash{0xb, 0xc}, evs[0].RemovedHashes)
	_, hit := p.lookup(0xb)
	assert.False(t, hit, "an evicted block no longer serves prefix hits")
	_, hit = p.lookup(0xa)
	assert.True(t, hit)

	// Everything active now: allocation fails instead of evicting.
	_, ok = p.alloc()
	require.True(t, ok)
	_, ok = p.alloc()
	assert.False(t, ok)
	require.NoError(t, p.audit())
}

func TestPool_HeldOnlyCounting(t *testing.T) {
	p := newBlockPool(2, false)
	s := storedBlock(t, p, 1)
	p.hold(s)
	assert.Equal(t, 1, p.heldOnly, "a block referenced only by a hold is held")
	p.acquire(s) // a running request hits the held prefix
	assert.Equal(t, 0, p.heldOnly, "shared with running work, it is load again")
	p.release(s)
	assert.Equal(t, 1, p.heldOnly)
	p.releaseHold(s)
	assert.Equal(t, 0, p.heldOnly)
	assert.Equal(t, 1, p.inactive)
	require.NoError(t, p.audit())
}

// TestPool_Conservation drives a bare pool with random operations and checks
// the counters and active + inactive + free == total after each.
func TestPool_Conservation(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(rt, "blocks")
		p := newBlockPool(n, true)
		type ref struct {
			slot int32
			held bool
		}
		var refs []ref
		for i := range rapid.IntRange(1, 200).Draw(rt, "ops") {
			_ = i
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0: // allocate and maybe store under a small hash space
				s, ok := p.alloc()
				if !ok {
					continue
				}
				if h := rapid.IntRange(0, 8).Draw(rt, "hash"); h > 0 {
					p.store(s, kv.SeqHash(h), kv.LocalHash(h))
				}
				refs = append(refs, ref{slot: s})
			case 1: // prefix hit
				h := kv.SeqHash(rapid.IntRange(1, 8).Draw(rt, "hit"))
				if s, ok := p.lookup(h); ok {
					p.acquire(s)
					refs = append(refs, ref{slot: s})
				}
			case 2, 3: // drop a reference
				if len(refs) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(refs)-1).Draw(rt, "drop")
				if refs[i].held {
					p.releaseHold(refs[i].slot)
				} else {
					p.release(refs[i].slot)
				}
				refs = append(refs[:i], refs[i+1:]...)
			case 4: // turn a reference into a hold
				if len(refs) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(refs)-1).Draw(rt, "hold")
				if !refs[i].held {
					p.hold(refs[i].slot)
					refs[i].held = true
				}
			}
			if err := p.audit(); err != nil {
				rt.Fatal(err)
			}
		}
	})
}

// TestPool_LRUMatchesList drives a pool and a plain model of it (a free
// stack and the inactive blocks in a list, least recently used first) with
// random allocations, stores, prefix hits and releases, and checks that
// every allocation picks the model's block and the LRU keeps the model's
// order. Small pools revive blocks often, so the ring fills with stale
// entries and compacts; some pools start just below the top of the 32-bit
// positions, and renumber them.
func TestPool_LRUMatchesList(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 10).Draw(rt, "blocks")
		p := newBlockPool(n, false)
		if rapid.Bool().Draw(rt, "nearTop") {
			// LRU positions are 32 bits: the ring renumbers them before
			// they reach lruTop.
			p.lruHead = lruTop - uint32(rapid.IntRange(0, 30).Draw(rt, "belowTop"))
			p.lruTail = p.lruHead
		}
		free := slices.Clone(p.free)
		var lru []int32
		index := map[kv.SeqHash]int32{}
		hashOf := make([]kv.SeqHash, n)
		ref := make([]int, n)
		var refs []int32 // one entry per reference held
		evict := func() (int32, bool) {
			if k := len(free); k > 0 {
				s := free[k-1]
				free = free[:k-1]
				return s, true
			}
			if len(lru) == 0 {
				return noSlot, false
			}
			s := lru[0]
			lru = lru[1:]
			delete(index, hashOf[s])
			hashOf[s] = 0
			return s, true
		}
		for range rapid.IntRange(1, 400).Draw(rt, "ops") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0: // allocate k blocks and maybe store some of them
				k := rapid.IntRange(1, 3).Draw(rt, "k")
				var want []int32
				for range k {
					s, ok := evict()
					if !ok {
						break
					}
					want = append(want, s)
					ref[s] = 1
				}
				got := p.allocN(nil, k)
				if !slices.Equal(got, want) {
					rt.Fatalf("allocN(%d) gave %v, model %v", k, got, want)
				}
				for _, s := range got {
					if h := kv.SeqHash(rapid.IntRange(0, 2*n).Draw(rt, "hash")); h > 0 {
						p.store(s, h, kv.LocalHash(h))
						if _, dup := index[h]; !dup {
							index[h] = s
							hashOf[s] = h
						}
					}
					refs = append(refs, s)
				}
			case 1: // a prefix hit
				h := kv.SeqHash(rapid.IntRange(1, 2*n).Draw(rt, "hit"))
				s, ok := p.lookup(h)
				if ws, wok := index[h]; ok != wok || ok && s != ws {
					rt.Fatalf("lookup %d: %d %v, model %d %v", h, s, ok, ws, wok)
				}
				if !ok {
					continue
				}
				if ref[s] == 0 {
					lru = slices.DeleteFunc(lru, func(x int32) bool { return x == s })
				}
				ref[s]++
				p.acquire(s)
				refs = append(refs, s)
			case 2, 3: // release some references, the last taken first
				k := rapid.IntRange(0, len(refs)).Draw(rt, "release")
				drop := refs[len(refs)-k:]
				refs = refs[:len(refs)-k]
				for i := len(drop) - 1; i >= 0; i-- {
					s := drop[i]
					if ref[s]--; ref[s] == 0 {
						if hashOf[s] != 0 {
							lru = append(lru, s)
						} else {
							free = append(free, s)
						}
					}
				}
				p.releaseAll(drop)
			}
			if got := p.lruOrder(); !slices.Equal(got, lru) && len(got)+len(lru) > 0 {
				rt.Fatalf("LRU %v, model %v", got, lru)
			}
			if !slices.Equal(p.free, free) {
				rt.Fatalf("free %v, model %v", p.free, free)
			}
			if err := p.audit(); err != nil {
				rt.Fatal(err)
			}
		}
	})
}

// TestPool_APromptsBlocksAreOneRun: a prompt's blocks cost the hash index
// one entry, stored in one run or block by block, and a prompt forking from
// it one more. A block evicted from the middle of a run leaves the blocks
// after it findable, as a run of their own.
func TestPool_APromptsBlocksAreOneRun(t *testing.T) {
	p := newBlockPool(16, true)
	locals := []kv.LocalHash{1, 2, 3, 4, 5, 6}
	a := chain(locals...)
	sa := p.allocN(nil, 3)
	p.storeRun(sa, a, locals, 0, noSlot)
	sa = p.allocN(sa, 3)
	for j := 3; j < 6; j++ {
		p.storeAt(sa[j], a, locals, j, sa[j-1])
	}
	require.Equal(t, 1, p.index.n, "one prompt, stored in two steps")

	forkLocals := []kv.LocalHash{1, 2, 9, 9}
	b := chain(forkLocals...)
	sb := []int32{p.cachedAt(b, 0), p.cachedAt(b, 1)}
	require.Equal(t, sa[:2], sb, "the fork's prefix is the prompt's")
	p.acquire(sb[0])
	p.acquire(sb[1])
	sb = p.allocN(sb, 2)
	p.storeRun(sb[2:], b, forkLocals, 2, sb[1])
	require.Equal(t, 2, p.index.n, "the fork heads a run of its own")
	require.NoError(t, p.audit())

	// Only a's block 3 is free to go: the pool evicts it from the middle
	// of a's run.
	p.release(sa[3])
	p.allocN(nil, len(p.free)+1)
	require.Equal(t, 3, p.index.n, "a's blocks 4 and 5 head a run")
	for j, want := range []int32{sa[0], sa[1], sa[2], noSlot, sa[4], sa[5]} {
		assert.Equal(t, want, p.cachedAt(a, j), "a's block %d", j)
		got, _ := p.lookup(a[j])
		assert.Equal(t, want, got, "a scan for a's block %d", j)
	}
	require.NoError(t, p.audit())
}

// TestPool_FullForkCounterStaysFull checks the fork counters' overflow
// rule: a counter at forkFull neither wraps to 0 when another head is
// counted (step would then miss that head) nor counts down when a head
// leaves (it no longer knows how many heads it stands for).
func TestPool_FullForkCounterStaysFull(t *testing.T) {
	p := newBlockPool(8, true)
	locals := []kv.LocalHash{1, 2, 3}
	a := chain(locals...)
	sa := p.allocN(nil, 3)
	p.storeRun(sa, a, locals, 0, noSlot)
	k := forkBucket(a[1])
	p.forks[k] = forkFull // as if a pool counted that many heads there

	forkLocals := []kv.LocalHash{1, 2, 9}
	b := chain(forkLocals...)
	sb := []int32{sa[0], sa[1]}
	p.acquire(sb[0])
	p.acquire(sb[1])
	sb = p.allocN(sb, 1)
	p.storeRun(sb[2:], b, forkLocals, 2, sb[1])
	require.Equal(t, sb[2], p.cachedAt(b, 2), "the fork's head is found past a full counter")
	require.Equal(t, uint16(forkFull), p.forks[k])
	require.NoError(t, p.audit())

	p.releaseAll(sb)
	p.releaseAll(sa)
	p.allocN(nil, len(p.free)+p.inactive) // evicts every block, the fork's head with them
	require.Equal(t, int32(noSlot), p.cachedAt(b, 2))
	require.Equal(t, uint16(forkFull), p.forks[k], "a full counter does not count down")
	require.NoError(t, p.audit())
}

// chain is the sequence hashes of blocks whose token hashes are locals.
func chain(locals ...kv.LocalHash) []kv.SeqHash {
	out := make([]kv.SeqHash, len(locals))
	for i, l := range locals {
		if i == 0 {
			out[i] = kv.SeqHash(l)
		} else {
			out[i] = kv.ChainHash(out[i-1], l)
		}
	}
	return out
}

// TestPool_ReleaseBatchMakesRoomInTheRing revives a request's blocks and
// releases them again, over and over, beside two blocks that stay in the
// LRU: each revival leaves stale entries in the LRU ring, and a release of
// the whole request must make room for all its blocks before it files any
// (compacting the ring when they would not fit), or it writes over the
// entries of the blocks that stayed.
func TestPool_ReleaseBatchMakesRoomInTheRing(t *testing.T) {
	p := newBlockPool(6, false)
	otherLocals := []kv.LocalHash{9, 8}
	other := p.allocN(nil, 2)
	p.storeRun(other, chain(otherLocals...), otherLocals, 0, noSlot)
	p.releaseAll(other)
	locals := []kv.LocalHash{1, 2, 3, 4}
	slots := p.allocN(nil, 4)
	p.storeRun(slots, chain(locals...), locals, 0, noSlot)
	revived := slices.Clone(slots)
	slices.Reverse(revived) // a release files the tail first
	want := append([]int32{other[1], other[0]}, revived...)
	for cycle := range 20 {
		p.releaseAll(slots)
		require.Equal(t, want, p.lruOrder(), "cycle %d", cycle)
		require.NoError(t, p.audit(), "cycle %d", cycle)
		for _, s := range revived { // oldest first: every revival but the last leaves a stale entry
			p.acquire(s)
		}
	}
}

// TestPool_OnlyAnAnnouncingPoolLogsEvictions: a pass's evictions of blocks
// a router holds go to the view log of a pool that announces its blocks. A
// decode worker's pool offers no view: it keeps neither the log nor the
// view's counters, and its audit does not ask for them.
func TestPool_OnlyAnAnnouncingPoolLogsEvictions(t *testing.T) {
	for _, announce := range []bool{true, false} {
		p := newBlockPool(2, announce)
		a := storedBlock(t, p, 0xa)
		b := storedBlock(t, p, 0xb)
		p.release(a)
		p.release(b)
		p.beginPass() // a and b are now the router's, if it is fed
		got := p.allocN(nil, 2)
		require.Len(t, got, 2, "both inactive blocks are evicted")
		if announce {
			assert.ElementsMatch(t, []kv.SeqHash{0xa, 0xb}, p.vl.gone, "the view answers for the evicted blocks")
			assert.Equal(t, 0, p.visible)
		} else {
			assert.Empty(t, p.vl.gone, "no view, no log")
		}
		require.NoError(t, p.audit())
	}
}
