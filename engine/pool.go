package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// noSlot marks an absent link in the intrusive LRU list.
const noSlot = -1

// pblock is one physical KV block. Blocks live in a slice and are named by
// their index, so the hot paths never allocate per block.
type pblock struct {
	hash kv.SeqHash
	ref  int32 // all references, holds included
	held int32 // references that are holds
	prev int32 // LRU links, valid while inactive
	next int32
	// indexed: the block is the pool's copy of hash, findable by prefix
	// matching. Private blocks (partial tails, duplicates, prefix caching
	// off) are never indexed and go straight back to the free list.
	indexed bool
}

// blockPool is a refcounted block pool with an inactive LRU of refcount-0
// blocks that still serve prefix hits. Counters are kept incrementally and
// audit recounts them from scratch.
type blockPool struct {
	blocks   []pblock
	free     []int32
	index    slotIndex
	lruHead  int32 // least recently used inactive block
	lruTail  int32
	active   int
	inactive int
	heldOnly int // blocks with ref > 0 whose every reference is a hold

	ev kvRecorder
}

func newBlockPool(total int, emit bool) *blockPool {
	p := &blockPool{
		blocks:  make([]pblock, total),
		free:    make([]int32, total),
		index:   newSlotIndex(total),
		lruHead: noSlot,
		lruTail: noSlot,
		ev:      kvRecorder{emit: emit},
	}
	// Hand out low slots first; purely cosmetic but keeps dumps readable.
	for i := range p.free {
		p.free[i] = int32(total - 1 - i)
	}
	return p
}

// lookup returns the indexed block for h.
func (p *blockPool) lookup(h kv.SeqHash) (int32, bool) {
	return p.index.get(h, p.blocks)
}

// isActive reports whether slot is referenced.
func (p *blockPool) isActive(slot int32) bool { return p.blocks[slot].ref > 0 }

func (p *blockPool) lruRemove(s int32) {
	b := &p.blocks[s]
	if b.prev != noSlot {
		p.blocks[b.prev].next = b.next
	} else {
		p.lruHead = b.next
	}
	if b.next != noSlot {
		p.blocks[b.next].prev = b.prev
	} else {
		p.lruTail = b.prev
	}
	b.prev, b.next = noSlot, noSlot
}

func (p *blockPool) lruPush(s int32) {
	b := &p.blocks[s]
	b.prev, b.next = p.lruTail, noSlot
	if p.lruTail != noSlot {
		p.blocks[p.lruTail].next = s
	} else {
		p.lruHead = s
	}
	p.lruTail = s
}

// acquire adds a reference to an indexed block found by a prefix hit,
// reviving it from the inactive LRU if needed.
func (p *blockPool) acquire(s int32) {
	b := &p.blocks[s]
	switch {
	case b.ref == 0:
		p.lruRemove(s)
		p.inactive--
		p.active++
	case b.held == b.ref:
		p.heldOnly--
	}
	b.ref++
}

// alloc returns a fresh private block with one reference, evicting the least
// recently used inactive block when no free block is left. ok is false when
// every block is active.
func (p *blockPool) alloc() (int32, bool) {
	var s int32
	if n := len(p.free); n > 0 {
		s = p.free[n-1]
		p.free = p.free[:n-1]
	} else if p.lruHead != noSlot {
		s = p.lruHead
		p.lruRemove(s)
		p.inactive--
		b := &p.blocks[s]
		p.index.remove(b.hash, p.blocks)
		p.ev.removed(b.hash)
	} else {
		return noSlot, false
	}
	p.blocks[s] = pblock{ref: 1, prev: noSlot, next: noSlot}
	p.active++
	return s, true
}

// release drops one non-hold reference.
func (p *blockPool) release(s int32) {
	b := &p.blocks[s]
	b.ref--
	switch {
	case b.ref == 0:
		p.active--
		p.retire(s)
	case b.held == b.ref:
		p.heldOnly++
	}
}

// hold turns one of the caller's references into a hold.
func (p *blockPool) hold(s int32) {
	b := &p.blocks[s]
	b.held++
	if b.held == b.ref {
		p.heldOnly++
	}
}

// releaseHold drops one hold reference.
func (p *blockPool) releaseHold(s int32) {
	b := &p.blocks[s]
	if b.held == b.ref && b.ref == 1 {
		p.heldOnly--
	}
	b.held--
	b.ref--
	if b.ref == 0 {
		p.active--
		p.retire(s)
	}
}

// retire files a block nobody references: indexed blocks stay findable in the
// inactive LRU (most recently used at the tail), private ones are freed.
func (p *blockPool) retire(s int32) {
	if p.blocks[s].indexed {
		p.lruPush(s)
		p.inactive++
		return
	}
	p.free = append(p.free, s)
}

// store gives a private block that just filled its sequence hash. If the
// hash is new to the pool the block becomes its indexed copy and a Stored
// event is recorded (contiguous runs share one event); if another copy is
// already indexed this one stays a private duplicate, as vLLM's pool does.
func (p *blockPool) store(s int32, h kv.SeqHash, local kv.LocalHash, parent kv.SeqHash, hasParent bool) {
	b := &p.blocks[s]
	b.hash = h
	if !p.index.add(h, s, p.blocks) {
		return
	}
	b.indexed = true
	p.ev.stored(h, local, parent, hasParent)
}

// audit recounts the pool from its blocks and reports the first
// disagreement with the incremental counters or a broken conservation law.
func (p *blockPool) audit() error {
	var active, inactive, heldOnly int
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.ref < 0 || b.held < 0 || b.held > b.ref {
			return fmt.Errorf("block %d: ref %d held %d out of range", i, b.ref, b.held)
		}
		if b.ref > 0 {
			active++
			if b.held == b.ref {
				heldOnly++
			}
		}
	}
	for s := p.lruHead; s != noSlot; s = p.blocks[s].next {
		if p.blocks[s].ref != 0 || !p.blocks[s].indexed {
			return fmt.Errorf("block %d in inactive LRU with ref %d indexed %v", s, p.blocks[s].ref, p.blocks[s].indexed)
		}
		inactive++
	}
	switch {
	case active != p.active:
		return fmt.Errorf("active counter %d, recount %d", p.active, active)
	case inactive != p.inactive:
		return fmt.Errorf("inactive counter %d, recount %d", p.inactive, inactive)
	case heldOnly != p.heldOnly:
		return fmt.Errorf("held-only counter %d, recount %d", p.heldOnly, heldOnly)
	case active+inactive+len(p.free) != len(p.blocks):
		return fmt.Errorf("active %d + inactive %d + free %d != total %d", active, inactive, len(p.free), len(p.blocks))
	}
	var err error
	indexed := 0
	p.index.each(func(s int32) bool {
		indexed++
		b := &p.blocks[s]
		if got, ok := p.index.get(b.hash, p.blocks); !b.indexed || !ok || got != s {
			err = fmt.Errorf("index entry for block %d (hash %x, indexed %v) finds block %d", s, uint64(b.hash), b.indexed, got)
		}
		return err == nil
	})
	if err == nil && indexed != p.index.n {
		err = fmt.Errorf("index counts %d entries, holds %d", p.index.n, indexed)
	}
	return err
}
