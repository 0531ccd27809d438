package cluster

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// KVPass is what one pass of one worker announced of its KV cache, as
// Config.OnKVEvents hears it: the blocks it stored and evicted, in the
// order the pass made the changes.
type KVPass struct {
	// Worker is the worker's place in Stats().Workers (one entry per
	// data-parallel rank); DPRank its rank.
	Worker int
	DPRank int
	// AtMs is the modeled instant the pass's output was delivered.
	AtMs float64
	// Events are the pass's events, numbered per worker (Event.ID) from 0.
	// They and their slices are the worker's, reused by its next pass:
	// copy what must outlive the call. Event.DPRank is not set; DPRank is.
	Events []kv.Event
}

// CachedBlocks returns the sequence hashes of the blocks the in-process
// worker at index (its place in Stats().Workers) holds in its prefix cache
// now: what its KV events have stored and not yet removed. A worker that
// announces no blocks (a decode worker, prefix caching off) holds none
// for this purpose. The order is the cache's, not meaningful.
func (c *Cluster) CachedBlocks(worker int) ([]kv.SeqHash, error) {
	if c.remote {
		return nil, fmt.Errorf("cached blocks: worker %d is reached through a transport; only in-process workers are read", worker)
	}
	if worker < 0 || worker >= len(c.workers) {
		return nil, fmt.Errorf("cached blocks: worker %d: the cluster has workers 0 to %d", worker, len(c.workers)-1)
	}
	var hs []kv.SeqHash
	c.query(func() { hs = c.workers[worker].w.CachedBlocks() })
	return hs, nil
}
