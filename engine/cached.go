package engine

import "github.com/kvstrand/mocker/kv"

// CachedBlocks returns the sequence hashes of the blocks w's prefix cache
// holds now, in the cache's own order: the blocks its KV events have
// stored and not removed. A worker that announces no blocks (KVView says
// so: a decode worker, or prefix caching off) returns none. It walks the
// whole pool, for tests and inspection, not for a hot path.
func (w *Worker) CachedBlocks() []kv.SeqHash {
	if _, ok := w.KVView(); !ok {
		return nil
	}
	var hs []kv.SeqHash
	switch s := w.sched.(type) {
	case *VLLM:
		for i := range s.pool.blocks {
			if b := &s.pool.blocks[i]; b.indexed() {
				hs = append(hs, b.hash)
			}
		}
	case *SGLang:
		for i := range s.cache.nodes {
			if n := &s.cache.nodes[i]; n.inTree {
				hs = append(hs, n.hash)
			}
		}
	}
	return hs
}

// HostBlocks returns the sequence hashes of the blocks w's host tier
// (num_g2_blocks) holds now, from the least to the most recently used: the
// blocks its KV events of the CPU medium have stored and not removed. A
// worker without a tier, or one that announces no blocks, returns none.
// Like CachedBlocks it is for tests and inspection.
func (w *Worker) HostBlocks() []kv.SeqHash {
	if _, ok := w.KVView(); !ok {
		return nil
	}
	s, ok := w.sched.(*VLLM)
	if !ok || s.pool.g2 == nil {
		return nil
	}
	t := s.pool.g2
	hs := make([]kv.SeqHash, 0, t.len())
	for i := t.head; i != noSlot; i = t.next[i] {
		hs = append(hs, t.hash[i])
	}
	return hs
}
