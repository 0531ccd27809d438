package engine

// lackWatch remembers a request whose admission or reservation lacked
// blocks, how many, and the pool's counts then. The blocks it lacks,
//
//	blocks - activeHits - (total - active),
//
// only a release (active falls) or a store of a block of its prompt (its
// active hits may grow) can bring down: taking a free block or an
// inactive hit, evicting one, or a hit becoming active leaves it or
// raises it. A released block lowers it by one at most (by none when it
// was one of the active hits, which then fall too), and a block allocated
// (taken free, or evicted) raises it by one at least (more when the
// eviction cuts the request's prefix short), so until the pool has
// released as many blocks as the request lacked beyond those it allocated
// since, or counts a store, the request lacks blocks still, and its
// prefix is not walked again. Stores
// count as the pool's stores until the request lacks blocks a second
// time; from then on the pool filters them (watch), counting only those
// that may be of its prompt: a request that waits long is walked again
// only when it may fit.
//
// Releases and stores come often on a busy pool, and a long prompt's
// store sets many bits of the filter, so the counts alone would have a
// request that waits for hundreds of blocks walked after every request
// that ends. A second bound needs no history. The walk stopped at the
// prompt's block hits (a miss, or the last block a hit may be): while it
// still would, the request has hits active hits at most, and lacks
//
//	blocks - hits - (total - active)
//
// blocks at least, which the pool's count of active blocks gives as it is
// now. The walk still stops there while block hits is not indexed after
// the indexed copy of block hits-1, the block the walk ended on (parent):
// a hash has one indexed copy, so while parent is still it, one step from
// it answers. Where parent no longer holds that hash (it was evicted, and
// maybe stored again elsewhere), the walk is made.
type lackWatch struct {
	s                           *seq
	lack                        uint64 // blocks lacked at the last walk, ≥ 1
	released, allocated, stores uint64
	filtered                    bool
	// blocks is the blocks the request needs, hits the prefix hits the
	// walk found, parent the last of them (noSlot for none).
	blocks, hits int
	parent       int32
}

// stillLacks says w's request is s, which lacks blocks as when w saw it.
func (v *VLLM) stillLacks(w *lackWatch, s *seq) bool {
	p := v.pool
	stores := p.stores
	if w.filtered {
		stores = p.watchStores
	}
	if w.s != s || v.walkAlways {
		return false
	}
	// Allocations may outnumber releases: the difference is signed.
	if int64(p.released-w.released)-int64(p.allocated-w.allocated) < int64(w.lack) && stores == w.stores {
		v.sparedWalks++
		return true
	}
	if w.blocks-w.hits-(v.total-p.active) > 0 && v.hitsEndAt(w, s) {
		v.sparedWalks++
		return true
	}
	return false
}

// hitsEndAt reports whether a walk of s's prefix would stop at w.hits
// hits or before: the prefix's block w.hits is not indexed after the
// indexed copy of block w.hits-1, which is still block w.parent. It
// answers false where it cannot tell without the walk.
func (v *VLLM) hitsEndAt(w *lackWatch, s *seq) bool {
	limit := (s.length - 1) / v.bs
	if !v.caching || w.hits >= limit {
		return true // no more blocks may hit
	}
	p := v.pool
	if w.hits == 0 {
		return p.step(noSlot, s.hashes[0]) == noSlot
	}
	if b := &p.blocks[w.parent]; !b.indexed() || b.hash != s.hashes[w.hits-1] {
		return false
	}
	return p.step(w.parent, s.hashes[w.hits]) == noSlot
}

// lacked has w remember that s, which needs blocks blocks and whose
// prefix walk found v.hitSlots, lacks lack blocks (≥ 1).
func (v *VLLM) lacked(w *lackWatch, s *seq, blocks, lack int) {
	w.blocks, w.hits, w.parent = blocks, len(v.hitSlots), noSlot
	if w.hits > 0 {
		w.parent = v.hitSlots[w.hits-1]
	}
	w.lack = uint64(lack)
	switch {
	case w.s != s:
		w.s, w.filtered = s, false
	case !w.filtered:
		w.filtered = true
		v.rewatch()
	}
	w.released, w.allocated, w.stores = v.pool.released, v.pool.allocated, v.pool.stores
	if w.filtered {
		w.stores = v.pool.watchStores
	}
}

// unlack has w forget its request.
func (v *VLLM) unlack(w *lackWatch) {
	if w.s != nil {
		refilter := w.filtered
		w.s, w.filtered = nil, false
		if refilter {
			v.rewatch()
		}
	}
}

// rewatch has the pool watch for stores of the prompt blocks the walks of
// the filtered requests read, and of those only.
func (v *VLLM) rewatch() {
	p := v.pool
	if p.watching { // a filter not watching is clear
		clear(p.watch[:])
		p.watching = false
	}
	for _, w := range [2]*lackWatch{&v.reserveLack, &v.admitLack} {
		if s := w.s; s != nil && w.filtered {
			p.watchAll(s.hashes[:min(len(s.hashes), (s.length-1)/v.bs)])
		}
	}
}
