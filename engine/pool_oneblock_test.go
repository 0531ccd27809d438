package engine

import "github.com/kvstrand/mocker/kv"

// The pool's operations one block at a time: what each batched operation
// of pool.go must equal, called once per block (pool_batch_test.go checks
// that on random sequences), and the small steps the pool's own tests take.

// alloc returns a fresh private block with one reference, evicting the least
// recently used inactive block when no free block is left. ok is false when
// every block is active.
func (p *blockPool) alloc() (int32, bool) {
	var s int32
	if n := len(p.free); n > 0 {
		s = p.free[n-1]
		p.free = p.free[:n-1]
	} else if p.inactive > 0 {
		s = p.lruOldest()
		p.lruHead++
		p.inactive--
		p.unlink(s)
		b := &p.blocks[s]
		p.ev.removed(b.hash)
		if p.viewed && !b.hidden() {
			p.visible--
			p.vl.evicted(b.hash, b.pass())
		}
	} else {
		return noSlot, false
	}
	p.blocks[s] = pblock{ref: 1}
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

// store gives a private block that just filled its sequence hash, with no
// parent. If the hash is new to the pool the block becomes its indexed copy
// and a Stored event is recorded; if another copy is already indexed this
// one stays a private duplicate, as vLLM's pool does.
func (p *blockPool) store(s int32, h kv.SeqHash, local kv.LocalHash) {
	p.storeAt(s, []kv.SeqHash{h}, []kv.LocalHash{local}, 0, noSlot)
}

// storeAt is store of block s, which just filled hashes[j] of a sequence
// whose block j-1 is parentSlot (noSlot: none, or unknown). The indexed
// copy of the parent hash is parentSlot if that is indexed, else found by
// walking the sequence from its first block; storeRun carries it from
// block to block.
func (p *blockPool) storeAt(s int32, hashes []kv.SeqHash, locals []kv.LocalHash, j int, parentSlot int32) {
	h := hashes[j]
	b := &p.blocks[s]
	b.hash = h
	cp := int32(noSlot)
	switch {
	case j == 0:
	case parentSlot != noSlot && p.blocks[parentSlot].indexed():
		cp = parentSlot
	default:
		cp = p.cachedAt(hashes, j-1)
	}
	if p.step(cp, h) != noSlot {
		return
	}
	var parent kv.SeqHash
	if j > 0 {
		parent = hashes[j-1]
	}
	if cp != noSlot && p.blocks[cp].next1 == 0 {
		p.blocks[cp].next1, b.run = s+1, cp+1
	} else {
		p.addHead(s, h, parent, j > 0)
	}
	p.ev.stored(h, locals[j], parent, j > 0, j)
	b.stamp = p.vl.pass
	if j > 0 && (cp == noSlot || p.blocks[cp].hidden()) {
		b.stamp |= hiddenBit
	}
	if !b.hidden() {
		p.visible++
		p.vl.freshVisible++
	}
}

// lookup is the indexed block of h, found by reading every block: a test
// may ask about any hash, where the pool itself finds a block only along
// its prompt's chain (step).
func (p *blockPool) lookup(h kv.SeqHash) (int32, bool) {
	for i := range p.blocks {
		if b := &p.blocks[i]; b.indexed() && b.hash == h {
			return int32(i), true
		}
	}
	return noSlot, false
}

// retire files a block nobody references: indexed blocks stay findable in the
// inactive LRU (most recently used at the tail), private ones are freed.
// releaseAll and releaseHoldAll write it out.
func (p *blockPool) retire(s int32) {
	if p.blocks[s].indexed() {
		p.lruPush(s)
		p.inactive++
		return
	}
	p.free = append(p.free, s)
}

// lruPush makes s the most recently used inactive block.
func (p *blockPool) lruPush(s int32) {
	if p.lruTail-p.lruHead == uint32(len(p.lru)) || p.lruTail == lruTop {
		p.lruMakeRoomFor(1)
	}
	p.lru[p.lruTail&p.lruMask] = s
	p.blocks[s].lruPos = p.lruTail
	p.lruTail++
}
