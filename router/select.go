package router

import "math"

// pick chooses one of cands (non-empty) by the configured mode. weight is
// the overlap score weight for kv mode; reuse says whether the request's
// blocks may be shared with blocks already active on a worker. With match
// it leaves the chosen worker's overlap depth in w.overlap for the caller
// to charge (kv mode leaves every candidate's, having weighed them all);
// without, the overlap counts as 0 and the index is not walked.
//
// Round-robin, random and power-of-two look at no other candidate than
// those they draw, so their cost does not grow with idle workers.
// Least-loaded must see every candidate's load, and kv mode every
// candidate's cost.
func (r *Router) pick(cands []*worker, req *Request, weight float64, reuse, match bool) *worker {
	var w *worker
	switch r.cfg.Mode {
	case ModeRoundRobin:
		ri := cands[0].role
		w = cands[r.rr[ri]%uint64(len(cands))]
		r.rr[ri]++
	case ModeRandom:
		w = cands[r.rng.IntN(len(cands))]
	case ModeLeastLoaded:
		w = r.leastLoaded(cands)
	case ModePowerOfTwo:
		if len(cands) == 1 {
			w = cands[0]
			break
		}
		i := r.rng.IntN(len(cands))
		j := r.rng.IntN(len(cands) - 1)
		if j >= i {
			j++
		}
		a, b := cands[i], cands[j]
		w = a
		if b.inflight < a.inflight {
			w = b
		}
	default:
		if match {
			r.overlaps(cands, req)
		} else {
			for _, c := range cands {
				c.overlap, c.tier = 0, 0
			}
		}
		return r.kvPick(cands, req, weight, reuse)
	}
	w.overlap, w.tier = 0, 0
	if match {
		w.overlap = r.overlap(w, req)
	}
	return w
}

// overlap is w's prefix overlap with the request, in blocks: overlaps for
// one worker.
func (r *Router) overlap(w *worker, req *Request) int {
	if len(req.LocalHashes) == 0 {
		return 0
	}
	if w.view != nil {
		return w.view.Depth(req.LocalHashes, req.SeqHashes)
	}
	r.scores = r.index.FindMatches(req.LocalHashes, false, r.scores[:0])
	for _, s := range r.scores {
		if s.Worker == w.info.ID {
			return s.Depth
		}
	}
	return 0
}

// overlaps sets each candidate's prefix overlap with the request, in blocks.
// Every mode needs it: the uncached part of the prompt is what a worker
// charges as pending prefill.
func (r *Router) overlaps(cands []*worker, req *Request) {
	for _, w := range cands {
		w.overlap = 0
	}
	if len(req.LocalHashes) == 0 {
		return
	}
	r.scores = r.index.FindMatches(req.LocalHashes, false, r.scores[:0])
	for _, s := range r.scores {
		if w := r.workers[s.Worker]; w != nil {
			w.overlap = s.Depth
		}
	}
	for _, w := range cands {
		if w.view != nil {
			w.overlap = w.view.Depth(req.LocalHashes, req.SeqHashes)
		}
	}
	r.tierCredits(cands, req)
}

// tierCredits sets each candidate's tier credit: the blocks its tiers
// below the GPU pool hold continuing its GPU overlap, weighed by the tier
// holding them, as Dynamo's kv router weighs them. The host tier's run
// comes first from where the GPU overlap stops, then the disk tier's,
// then object storage's (indexer.TierRun). With no tier block indexed,
// as in every run without tiers, it asks nothing.
func (r *Router) tierCredits(cands []*worker, req *Request) {
	for _, w := range cands {
		w.tier = 0
	}
	hw, dw := r.cfg.HostCacheHitWeight, r.cfg.DiskCacheHitWeight
	if !r.index.HasTiers() || hw == 0 && dw == 0 {
		return
	}
	for _, w := range cands {
		if w.overlap >= len(req.SeqHashes) {
			continue
		}
		run := r.index.TierRun(w.info.ID, req.SeqHashes, w.overlap)
		w.tier = hw*float64(run[0]) + dw*float64(run[1]+run[2])
	}
}

// treeSize is how many blocks the index holds for w, or w's view says the
// index would.
func (r *Router) treeSize(w *worker) int {
	if w.view != nil {
		return w.view.Blocks()
	}
	return r.index.TreeSize(w.info.ID)
}

// leastLoaded takes the fewest in-flight requests, then the fewest reported
// router-facing active blocks, then a uniform choice among the tied.
func (r *Router) leastLoaded(cands []*worker) *worker {
	best, n := cands[0], 1
	for _, w := range cands[1:] {
		switch c := compareLoad(w, best); {
		case c < 0:
			best, n = w, 1
		case c == 0:
			n++
			if r.rng.IntN(n) == 0 {
				best = w
			}
		}
	}
	return best
}

func compareLoad(a, b *worker) int {
	if a.inflight != b.inflight {
		return a.inflight - b.inflight
	}
	return a.load.RouterActiveBlocks - b.load.RouterActiveBlocks
}

// kvPick applies Dynamo's classic cost, lower is better:
//
//	prefill_blocks = (pending prefill tokens + prompt tokens not cached) / block size
//	decode_blocks  = predicted active blocks + request blocks not already active
//	cost           = weight × prefill_blocks + decode_blocks
//	               + decode_active_request_weight × requests in flight
//
// where the prompt tokens cached are (overlap + tier credit) × block size,
// the tier credit being the weighed blocks its tiers hold past its GPU
// overlap (tierCredits; 0 without tiers, when the cost is the classic
// one exactly). It breaks ties by the smaller indexed tree, then at
// random. Under
// dynamo_compat it applies Dynamo main's instead, which differs only where
// the overlap exceeds the raw prefill (it clamps the difference at 0) and
// in the tie-break (uniform at random):
//
//	prefill_blocks = max((pending prefill tokens + prompt tokens) / block size − overlap blocks − tier credit, 0)
func (r *Router) kvPick(cands []*worker, req *Request, weight float64, reuse bool) *worker {
	for _, w := range cands {
		w.shared = 0
	}
	// Only requests in flight with shared-block legs ref blocks; with none
	// there is nothing to look up.
	if reuse && r.blocks.Len() > 0 {
		for _, h := range req.SeqHashes {
			e := r.blocks.Lookup(h)
			if e == nil {
				continue
			}
			r.slots[e.first.slot].shared++
			if e.more != 0 {
				for _, o := range r.mores[e.more-1] {
					r.slots[o.slot].shared++
				}
			}
		}
	}
	bs := float64(r.cfg.BlockSize)
	n := len(req.SeqHashes)
	lo, hi := math.Inf(1), math.Inf(-1)
	compat := r.cfg.DynamoCompat
	for _, w := range cands {
		var prefill float64
		switch {
		case compat:
			raw := float64(w.prefill+req.PromptTokens) / bs
			prefill = max(raw-float64(w.overlap)-w.tier, 0)
		case w.tier > 0:
			// Tier hits are weighed blocks, so the cached part of the
			// prompt is no longer a whole number of blocks.
			cached := (float64(w.overlap) + w.tier) * bs
			prefill = (float64(w.prefill) + max(float64(req.PromptTokens)-cached, 0)) / bs
		default:
			prefill = float64(w.prefill+uncached(req, w.overlap, r.cfg.BlockSize)) / bs
		}
		decode := float64(w.active + n - w.shared)
		w.cost = weight*prefill + decode + r.cfg.DecodeActiveRequestWeight*float64(w.inflight)
		lo, hi = min(lo, w.cost), max(hi, w.cost)
	}
	if t := r.cfg.RouterTemperature; t > 0 {
		return r.softmax(cands, lo, hi, t)
	}
	if compat {
		r.ties = r.ties[:0]
		for _, w := range cands {
			if w.cost == lo {
				r.ties = append(r.ties, w)
			}
		}
		return r.ties[r.rng.IntN(len(r.ties))]
	}
	// Ties go to the worker with the fewest indexed blocks (the one whose
	// cache is least loaded), then uniformly at random.
	r.ties = r.ties[:0]
	bestTree := math.MaxInt
	for _, w := range cands {
		if w.cost != lo {
			continue
		}
		ts := r.treeSize(w)
		if ts < bestTree {
			bestTree = ts
			r.ties = r.ties[:0]
		}
		if ts == bestTree {
			r.ties = append(r.ties, w)
		}
	}
	if len(r.ties) == 1 {
		return r.ties[0]
	}
	return r.ties[r.rng.IntN(len(r.ties))]
}

// softmax samples a worker with probability proportional to
// exp(−(cost − lo) / ((hi − lo) × t)): costs are range-normalised so the
// temperature means the same whatever the load, and equal costs are a
// uniform draw.
func (r *Router) softmax(cands []*worker, lo, hi, t float64) *worker {
	if hi == lo {
		return cands[r.rng.IntN(len(cands))]
	}
	span := (hi - lo) * t
	sum := 0.0
	for _, w := range cands {
		w.cost = math.Exp(-(w.cost - lo) / span)
		sum += w.cost
	}
	u := r.rng.Float64() * sum
	for _, w := range cands {
		if u < w.cost {
			return w
		}
		u -= w.cost
	}
	return cands[len(cands)-1]
}
