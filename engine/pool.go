package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// noSlot is no block or node (the radix cache's links, an allocation that
// found every block active).
const noSlot = -1

// pblock is one physical KV block. Blocks live in a slice and are named by
// their index, so the hot paths never allocate per block.
type pblock struct {
	hash kv.SeqHash
	ref  int32 // all references, holds included
	held int32 // references that are holds
	// lruPos is the block's position in the inactive LRU while it is
	// inactive, 0 otherwise.
	lruPos uint64
	// indexed: the block is the pool's copy of hash, findable by prefix
	// matching. Private blocks (partial tails, duplicates, prefix caching
	// off) are never indexed and go straight back to the free list.
	indexed bool
	// hidden: a router fed the pool's events drops the block's (its
	// Stored event names a parent the router does not hold), so it never
	// learns of it. pass is the pool's pass that stored the block: the
	// block is fresh, its event perhaps not with a router yet, while that
	// is the pool's pass. See KVView.
	hidden bool
	pass   uint32
}

// blockPool is a refcounted block pool with an inactive LRU of refcount-0
// blocks that still serve prefix hits. Counters are kept incrementally and
// audit recounts them from scratch.
//
// The LRU is a ring of slots in the order they became inactive, positions
// counting up from 1 without end: the entry at position q is
// lru[q&lruMask], and it stands for its block while the block's lruPos is
// q. A block revived by a prefix hit leaves a stale entry behind, which
// eviction skips and compaction drops. Eviction reads the ring in order
// and the blocks it names independently of each other, where a linked list
// would chase one block's link to find the next: a full pool evicts a
// request's worth of blocks at a time, and those reads' cache misses now
// overlap.
type blockPool struct {
	blocks  []pblock
	free    []int32
	index   slotIndex
	lru     []int32
	lruMask uint64
	// Positions [lruHead, lruTail) of the ring are in use; the least
	// recently used inactive block is the first valid entry from lruHead.
	lruHead  uint64
	lruTail  uint64
	active   int
	inactive int
	heldOnly int // blocks with ref > 0 whose every reference is a hold

	ev kvRecorder
	// vl is what KVView needs to answer as a router fed ev's events
	// would; visible counts the blocks such a router holds, those indexed
	// and not hidden.
	vl      viewLog
	visible int
	// touched keeps the reads of the batched operations' prefetches from
	// being optimised away; its value means nothing.
	touched uint32
}

func newBlockPool(total int, emit bool) *blockPool {
	// Room for twice the blocks, so that a compaction, which leaves at
	// most every block, frees at least half the ring.
	ring := 1
	for ring < 2*total {
		ring <<= 1
	}
	p := &blockPool{
		blocks:  make([]pblock, total),
		free:    make([]int32, total),
		index:   newSlotIndex(total),
		lru:     make([]int32, ring),
		lruMask: uint64(ring - 1),
		lruHead: 1,
		lruTail: 1,
		ev:      kvRecorder{emit: emit},
		vl:      newViewLog(),
	}
	// Hand out low slots first; purely cosmetic but keeps dumps readable.
	for i := range p.free {
		p.free[i] = int32(total - 1 - i)
	}
	return p
}

// touch brings the index entries of hs into cache ahead of their lookups
// (see slotIndex.touch).
func (p *blockPool) touch(hs []kv.SeqHash) { p.touched += p.index.touch(hs) }

// lookup returns the indexed block for h.
func (p *blockPool) lookup(h kv.SeqHash) (int32, bool) {
	return p.index.get(h, p.blocks)
}

// isActive reports whether slot is referenced.
func (p *blockPool) isActive(slot int32) bool { return p.blocks[slot].ref > 0 }

// lruRemove takes inactive block s out of the LRU. Its entry goes stale,
// unless it is the newest, which is dropped: a prefix hit usually revives
// the blocks a request released last.
func (p *blockPool) lruRemove(s int32) {
	b := &p.blocks[s]
	if b.lruPos != 0 && b.lruPos == p.lruTail-1 {
		p.lruTail--
	}
	b.lruPos = 0
}

// lruPush makes s the most recently used inactive block.
func (p *blockPool) lruPush(s int32) {
	if p.lruTail-p.lruHead == uint64(len(p.lru)) {
		p.lruCompact()
	}
	p.lru[p.lruTail&p.lruMask] = s
	p.blocks[s].lruPos = p.lruTail
	p.lruTail++
}

// lruCompact drops the stale entries of a full ring, moving the valid ones
// up towards the head in order. They are at most every block, so at least
// half the ring comes free.
func (p *blockPool) lruCompact() {
	w := p.lruHead
	for q := p.lruHead; q < p.lruTail; q++ {
		s := p.lru[q&p.lruMask]
		if b := &p.blocks[s]; b.lruPos == q {
			p.lru[w&p.lruMask] = s
			b.lruPos = w
			w++
		}
	}
	p.lruTail = w
}

// lruOldest is the least recently used inactive block, of which there
// must be one; the stale entries before it are dropped.
func (p *blockPool) lruOldest() int32 {
	for {
		if s := p.lru[p.lruHead&p.lruMask]; p.blocks[s].lruPos == p.lruHead {
			return s
		}
		p.lruHead++
	}
}

// lruOrder is the inactive blocks, least recently used first.
func (p *blockPool) lruOrder() []int32 {
	var out []int32
	for q := p.lruHead; q < p.lruTail; q++ {
		if s := p.lru[q&p.lruMask]; p.blocks[s].lruPos == q {
			out = append(out, s)
		}
	}
	return out
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

// allocN appends up to n fresh private blocks to dst, each with one
// reference, and returns it: the blocks n calls of alloc would return, in
// the same order, with the same evictions and Removed events. It stops
// short only when every block is active.
//
// Evictions take a run from the LRU's head, and the walk down the run reads
// the home entries of the evicted hashes in the index: reads that do not
// wait on each other, so the removals that follow find them in cache
// instead of missing on each in turn.
func (p *blockPool) allocN(dst []int32, n int) []int32 {
	if k := min(n, len(p.free)); k > 0 {
		top := len(p.free) - 1
		for i := range k {
			s := p.free[top-i]
			p.blocks[s] = pblock{ref: 1}
			dst = append(dst, s)
		}
		p.free = p.free[:top+1-k]
		p.active += k
		n -= k
	}
	if n = min(n, p.inactive); n <= 0 {
		return dst
	}
	start := len(dst)
	removed := p.ev.removedRun(n)
	var touched uint32
	entries, mask := p.index.entries, p.index.mask
	q := p.lruHead
	for i := 0; i < n; q++ {
		s := p.lru[q&p.lruMask]
		b := &p.blocks[s]
		if b.lruPos != q {
			continue // revived since it was filed
		}
		touched += entries[uint64(b.hash)&mask].low
		if removed != nil {
			removed[i] = b.hash
		}
		dst = append(dst, s)
		i++
	}
	p.touched += touched
	p.lruHead = q
	p.inactive -= n
	p.active += n
	for _, s := range dst[start:] {
		b := &p.blocks[s]
		p.index.removeSlot(b.hash, s)
		if !b.hidden {
			p.visible--
			p.vl.evicted(b.hash, b.pass)
		}
		*b = pblock{ref: 1}
	}
	p.vl.changed()
	return dst
}

// releaseAll drops one non-hold reference from each of slots, last slot
// first, as that many calls of release would: a sequence's tail enters the
// inactive LRU before its prefix, so it is evicted first.
func (p *blockPool) releaseAll(slots []int32) {
	active, heldOnly := p.active, p.heldOnly
	for i := len(slots) - 1; i >= 0; i-- {
		s := slots[i]
		b := &p.blocks[s]
		b.ref--
		switch {
		case b.ref == 0:
			active--
			p.retire(s)
		case b.held == b.ref:
			heldOnly++
		}
	}
	p.active, p.heldOnly = active, heldOnly
}

// holdAll turns one of the caller's references to each of slots into a
// hold.
func (p *blockPool) holdAll(slots []int32) {
	heldOnly := p.heldOnly
	for _, s := range slots {
		b := &p.blocks[s]
		b.held++
		if b.held == b.ref {
			heldOnly++
		}
	}
	p.heldOnly = heldOnly
}

// releaseHoldAll drops one hold reference from each of slots, last slot
// first, as that many calls of releaseHold would.
func (p *blockPool) releaseHoldAll(slots []int32) {
	active, heldOnly := p.active, p.heldOnly
	for i := len(slots) - 1; i >= 0; i-- {
		s := slots[i]
		b := &p.blocks[s]
		if b.held == b.ref && b.ref == 1 {
			heldOnly--
		}
		b.held--
		b.ref--
		if b.ref == 0 {
			active--
			p.retire(s)
		}
	}
	p.active, p.heldOnly = active, heldOnly
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

// storeRun stores a run of consecutive blocks of one sequence: slots[i]
// just filled hashes[i] (token hash locals[i]), whose parent is the
// previous hash of the run, the first one's parent, when hasParent. It is
// that many calls of store, in order, but reads the home entries of all
// the hashes in the index first: independent reads that overlap, instead
// of one cache miss per add in turn.
func (p *blockPool) storeRun(slots []int32, hashes []kv.SeqHash, locals []kv.LocalHash, parent kv.SeqHash, hasParent bool) {
	hashes, locals = hashes[:len(slots)], locals[:len(slots)]
	p.touched += p.index.touch(hashes)
	// chained: the previous block of the run was the last one recorded,
	// so the next one recorded joins its event.
	chained := false
	// hidden is whether a router drops the Stored event of the block
	// stored last, valid while added.
	hidden, added := false, false
	for i, s := range slots {
		h := hashes[i]
		b := &p.blocks[s]
		b.hash = h
		if !p.index.add(h, s, p.blocks) {
			chained, added = false, false
			parent, hasParent = h, true
			continue
		}
		b.indexed = true
		if chained {
			p.ev.storedNext(h, locals[i])
		} else {
			p.ev.stored(h, locals[i], parent, hasParent)
			chained = p.ev.emit
		}
		if !added {
			hidden = hasParent && !p.routerHolds(parent)
		}
		added = true
		b.pass, b.hidden = p.vl.pass, hidden
		if !hidden {
			p.visible++
			p.vl.freshVisible++
		}
		parent, hasParent = h, true
	}
	if len(slots) > 0 {
		p.vl.changed()
	}
}

// routerHolds reports whether a router fed the pool's KV events holds h
// once it has them all: h is indexed and its Stored event was not dropped.
// A Stored event whose parent the router does not hold is dropped whole,
// so its blocks are hidden, and so are their descendants.
func (p *blockPool) routerHolds(h kv.SeqHash) bool {
	s, ok := p.index.get(h, p.blocks)
	return ok && !p.blocks[s].hidden
}

// beginPass starts a pass: the last pass's stores and evictions are now
// the router's, if it has all the events.
func (p *blockPool) beginPass() {
	if p.vl.begin() {
		for i := range p.blocks {
			p.blocks[i].pass = 0
		}
	}
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
	for _, s := range p.lruOrder() {
		if p.blocks[s].ref != 0 || !p.blocks[s].indexed {
			return fmt.Errorf("block %d in inactive LRU with ref %d indexed %v", s, p.blocks[s].ref, p.blocks[s].indexed)
		}
		inactive++
	}
	// Every block that claims a place in the ring holds it: the ring names
	// it there, inside the positions in use.
	for i := range p.blocks {
		if q := p.blocks[i].lruPos; q != 0 && (q < p.lruHead || q >= p.lruTail || p.lru[q&p.lruMask] != int32(i)) {
			return fmt.Errorf("block %d claims LRU position %d, ring [%d, %d) has block %d there",
				i, q, p.lruHead, p.lruTail, p.lru[q&p.lruMask])
		}
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
	indexed, visible, freshVisible := 0, 0, 0
	p.index.each(func(s int32) bool {
		indexed++
		b := &p.blocks[s]
		if !b.hidden {
			visible++
			if b.pass == p.vl.pass {
				freshVisible++
			}
		}
		if got, ok := p.index.get(b.hash, p.blocks); !b.indexed || !ok || got != s {
			err = fmt.Errorf("index entry for block %d (hash %x, indexed %v) finds block %d", s, uint64(b.hash), b.indexed, got)
		}
		return err == nil
	})
	switch {
	case err != nil:
	case indexed != p.index.n:
		err = fmt.Errorf("index counts %d entries, holds %d", p.index.n, indexed)
	case visible != p.visible || freshVisible != p.vl.freshVisible:
		err = fmt.Errorf("a router holds %d blocks (%d of the last pass) by the counters, %d (%d) by a recount",
			p.visible, p.vl.freshVisible, visible, freshVisible)
	}
	return err
}
