package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// hostTier is a lower KV tier below the GPU pool (KVBM's G2, host memory):
// the hashes of blocks the GPU pool's prefix cache evicted, kept in a
// bounded LRU. Holding a hash stands for holding the block's KV: since a
// sequence hash is chained from its parent's, a run of held hashes from a
// prompt's first missing block on is a prefix the worker can copy back
// (onboard) instead of recomputing it.
//
// Entries live in fixed slices named by slot, linked into a list from the
// least to the most recently used; the map finds a hash's slot. Its size
// never exceeds the capacity it was built with.
type hostTier struct {
	slots map[kv.SeqHash]int32
	hash  []kv.SeqHash
	prev  []int32
	next  []int32
	// head is the least recently used slot, tail the most; noSlot when
	// empty.
	head, tail int32
	// offloaded counts the blocks the tier took in (a hash already held is
	// refreshed, not counted), dropped those it evicted to make room,
	// onboarded those copied back to the GPU pool.
	offloaded, dropped, onboarded uint64
}

func newHostTier(capacity int) *hostTier {
	return &hostTier{
		slots: make(map[kv.SeqHash]int32, capacity),
		hash:  make([]kv.SeqHash, 0, capacity),
		prev:  make([]int32, 0, capacity),
		next:  make([]int32, 0, capacity),
		head:  noSlot,
		tail:  noSlot,
	}
}

// len is how many blocks the tier holds.
func (t *hostTier) len() int { return len(t.slots) }

// capacity is the most blocks it holds.
func (t *hostTier) capacity() int { return cap(t.hash) }

func (t *hostTier) detach(s int32) {
	p, n := t.prev[s], t.next[s]
	if p != noSlot {
		t.next[p] = n
	} else {
		t.head = n
	}
	if n != noSlot {
		t.prev[n] = p
	} else {
		t.tail = p
	}
}

func (t *hostTier) append(s int32) {
	t.prev[s], t.next[s] = t.tail, noSlot
	if t.tail != noSlot {
		t.next[t.tail] = s
	} else {
		t.head = s
	}
	t.tail = s
}

// put files h as the most recently used block, evicting the least recently
// used one when the tier is full. It reports whether h is new to the tier
// (one it already held is only refreshed) and, when it evicted one, the
// hash it dropped.
func (t *hostTier) put(h kv.SeqHash) (added bool, dropped kv.SeqHash, didDrop bool) {
	if s, ok := t.slots[h]; ok {
		t.touchSlot(s)
		return false, 0, false
	}
	t.offloaded++
	var s int32
	if len(t.hash) < cap(t.hash) {
		s = int32(len(t.hash))
		t.hash = append(t.hash, h)
		t.prev = append(t.prev, noSlot)
		t.next = append(t.next, noSlot)
	} else {
		s = t.head
		t.detach(s)
		dropped, didDrop = t.hash[s], true
		delete(t.slots, dropped)
		t.dropped++
		t.hash[s] = h
	}
	t.slots[h] = s
	t.append(s)
	return true, dropped, didDrop
}

func (t *hostTier) touchSlot(s int32) {
	if s != t.tail {
		t.detach(s)
		t.append(s)
	}
}

// run counts the hashes of hs, from the first, that the tier holds, and
// marks them the most recently used, in order.
func (t *hostTier) run(hs []kv.SeqHash) int {
	for i, h := range hs {
		s, ok := t.slots[h]
		if !ok {
			return i
		}
		t.touchSlot(s)
	}
	return len(hs)
}

// audit checks the list against the map.
func (t *hostTier) audit() error {
	n := 0
	for s, last := t.head, int32(noSlot); s != noSlot; last, s = s, t.next[s] {
		if t.prev[s] != last {
			return fmt.Errorf("host tier: slot %d's prev is %d, want %d", s, t.prev[s], last)
		}
		if got, ok := t.slots[t.hash[s]]; !ok || got != s {
			return fmt.Errorf("host tier: slot %d's hash not mapped to it", s)
		}
		if n++; n > len(t.slots) {
			return fmt.Errorf("host tier: list longer than its %d entries", len(t.slots))
		}
	}
	if n != len(t.slots) || len(t.slots) > t.capacity() {
		return fmt.Errorf("host tier: list has %d entries, map %d, capacity %d", n, len(t.slots), t.capacity())
	}
	return nil
}
