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
