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
		b := &p.blocks[s]
		p.index.removeSlot(b.hash, s)
		p.ev.removed(b.hash)
		if !b.hidden {
			p.visible--
			if b.pass == p.vl.pass {
				p.vl.freshVisible--
			} else {
				p.vl.gone = append(p.vl.gone, b.hash)
			}
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
	b.pass, b.hidden = p.vl.pass, hasParent && !p.routerHolds(parent)
	if !b.hidden {
		p.visible++
		p.vl.freshVisible++
	}
}
