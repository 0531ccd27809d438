package cluster

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// KVPass is what one pass of one worker announced of its KV cache, as
// Config.OnKVEvents hears it: the blocks it stored and evicted, in the
// order the pass made the changes, on the GPU pool and (num_g2_blocks)
// its host tier, each event naming its medium.
type KVPass struct {
	// Worker is the worker's place in Stats().Workers (one entry per
	// data-parallel rank); DPRank its rank.
	Worker int
	DPRank int
	// AtMs is the modeled instant the pass's output was delivered.
	AtMs float64
	// Events are the pass's events, numbered per worker and medium
	// (Event.ID) from 0.
	// They and their slices are the worker's, reused by its next pass:
	// copy what must outlive the call. Event.DPRank is not set; DPRank is.
	Events []kv.Event
	// Tokens are the token ids of the blocks the Stored events of the
	// GPU medium store, BlockSize per block, in the order of Events and
	// of their Blocks: the first BlockSize ids are those of the first
	// such event's first block. A Stored event of a lower tier
	// (kv.MediumCPU and below) has none. A prompt block's ids are the request's prompt tokens
	// (Request.Tokens, or those the cluster draws for PromptTokens and
	// Prefix); a block of generated tokens holds the ids the worker
	// generated, which its block hashes chain over (package engine: a
	// function of the worker's seed, the request and the token's index,
	// in [1000, 2000)). So kv.BlockHashes over a sequence's tokens gives
	// its blocks' hashes. Like Events, Tokens is reused by the next pass.
	Tokens []uint32
}

// CachedBlocks returns the sequence hashes of the blocks the in-process
// worker at index (its place in Stats().Workers) holds in its prefix cache
// now: what its KV events have stored and not yet removed. A worker that
// announces no blocks (a decode worker, prefix caching off) holds none
// for this purpose. The order is the cache's, not meaningful.
func (c *Cluster) CachedBlocks(worker int) ([]kv.SeqHash, error) {
	if c.remote != nil {
		return nil, fmt.Errorf("cached blocks: worker %d is reached through a transport; only in-process workers are read", worker)
	}
	if worker < 0 || worker >= len(c.workers) {
		return nil, fmt.Errorf("cached blocks: worker %d: the cluster has workers 0 to %d", worker, len(c.workers)-1)
	}
	var hs []kv.SeqHash
	c.query(func() { hs = c.workers[worker].w.CachedBlocks() })
	return hs, nil
}

// HostBlocks returns the sequence hashes of the blocks the in-process
// worker at index holds in its host tier (num_g2_blocks) now: what its KV
// events of the CPU medium have stored and not yet removed, from the least
// to the most recently used. A worker without a tier holds none.
func (c *Cluster) HostBlocks(worker int) ([]kv.SeqHash, error) {
	if c.remote != nil {
		return nil, fmt.Errorf("host blocks: worker %d is reached through a transport; only in-process workers are read", worker)
	}
	if worker < 0 || worker >= len(c.workers) {
		return nil, fmt.Errorf("host blocks: worker %d: the cluster has workers 0 to %d", worker, len(c.workers)-1)
	}
	var hs []kv.SeqHash
	c.query(func() { hs = c.workers[worker].w.HostBlocks() })
	return hs, nil
}
