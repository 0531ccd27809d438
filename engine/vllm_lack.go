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
type lackWatch struct {
	s                           *seq
	lack                        uint64 // blocks lacked at the last walk, ≥ 1
	released, allocated, stores uint64
	filtered                    bool
}

// stillLacks says w's request is s, which lacks blocks as when w saw it.
func (v *VLLM) stillLacks(w *lackWatch, s *seq) bool {
	p := v.pool
	stores := p.stores
	if w.filtered {
		stores = p.watchStores
	}
	// Allocations may outnumber releases: the difference is signed.
	if w.s == s && int64(p.released-w.released)-int64(p.allocated-w.allocated) < int64(w.lack) && stores == w.stores && !v.walkAlways {
		v.sparedWalks++
		return true
	}
	return false
}

// lacked has w remember that s lacks lack blocks (≥ 1).
func (v *VLLM) lacked(w *lackWatch, s *seq, lack int) {
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
