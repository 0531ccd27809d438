package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/kv"
)

// openGate is a Gate nothing waits on: these tests only Settle.
type openGate struct{}

func (openGate) Wait(context.Context) bool { return true }
func (openGate) Open()                     {}

// TestKVPass_EventsRebuildEachWorkersCache: a consumer that applies every
// KVPass a worker announces (stored hashes join its set, removed ones
// leave) holds, once the run is over, exactly the blocks the worker's
// cache holds (Cluster.CachedBlocks); it never hears a block stored twice
// or one removed that it does not hold; and each worker's event ids run
// from 0 without a gap. Over random schedules on both engines, aggregated
// and disaggregated, with data-parallel ranks and pools small enough to
// evict. Every stored block comes with block_size token ids (KVPass.Tokens)
// whose chained hash is its hash, and a block stored again, on any worker,
// comes with the same ids.
func TestKVPass_EventsRebuildEachWorkersCache(t *testing.T) {
	var stored, removed, restored int
	rapid.Check(t, func(rt *rapid.T) {
		eng := rapid.SampledFrom([]string{"vllm", "sglang"}).Draw(rt, "engine")
		bs := rapid.SampledFrom([]int{4, 16}).Draw(rt, "block_size")
		args := map[string]any{
			"block_size":     bs,
			"num_gpu_blocks": rapid.IntRange(24, 300).Draw(rt, "num_gpu_blocks"),
			"max_num_seqs":   rapid.IntRange(1, 8).Draw(rt, "max_num_seqs"),
			"dp_size":        rapid.IntRange(1, 2).Draw(rt, "dp_size"),
		}
		cfg := Config{Engine: eng, Workers: rapid.IntRange(1, 2).Draw(rt, "workers"), Router: "kv", Seed: 3, Args: args}
		if rapid.Bool().Draw(rt, "disagg") {
			cfg = Config{Engine: eng, Disagg: true, Router: "kv", Seed: 3, Args: args,
				Prefill: PoolConfig{Workers: rapid.IntRange(1, 2).Draw(rt, "prefills")},
				Decode:  PoolConfig{Workers: 1, Args: map[string]any{"num_gpu_blocks": 2048}}}
		}
		var sets []map[kv.SeqHash]bool
		var nextID []uint64
		var bad string
		tokensOf := map[kv.SeqHash][]uint32{}
		cfg.OnKVEvents = func(p KVPass) {
			if msg := checkKVTokens(p, bs, tokensOf, &restored); msg != "" && bad == "" {
				bad = msg
			}
			for len(sets) <= p.Worker {
				sets = append(sets, map[kv.SeqHash]bool{})
				nextID = append(nextID, 0)
			}
			set := sets[p.Worker]
			for _, ev := range p.Events {
				if ev.ID != nextID[p.Worker] && bad == "" {
					bad = fmt.Sprintf("worker %d: event id %d after %d", p.Worker, ev.ID, nextID[p.Worker]-1)
				}
				nextID[p.Worker] = ev.ID + 1
				switch ev.Kind {
				case kv.Stored:
					for _, b := range ev.Blocks {
						if set[b.Hash] && bad == "" {
							bad = fmt.Sprintf("worker %d: block %x stored twice", p.Worker, b.Hash)
						}
						set[b.Hash] = true
						stored++
					}
				case kv.Removed:
					for _, h := range ev.RemovedHashes {
						if !set[h] && bad == "" {
							bad = fmt.Sprintf("worker %d: block %x removed, never stored", p.Worker, h)
						}
						delete(set, h)
						removed++
					}
				case kv.Cleared:
					clear(set)
				}
			}
		}
		c, err := NewStepped(cfg, func() Gate { return openGate{} })
		require.NoError(rt, err)
		defer c.Close()
		n := rapid.IntRange(1, 80).Draw(rt, "requests")
		ended := 0
		at := 0.0
		for i := range n {
			if rapid.IntRange(0, 2).Draw(rt, "gap") == 0 {
				at += float64(rapid.IntRange(0, 300).Draw(rt, "gap_ms"))
			}
			req := Request{MaxTokens: rapid.IntRange(1, 40).Draw(rt, "max_tokens"),
				PromptTokens: rapid.IntRange(1, 400).Draw(rt, "prompt"),
				Prefix:       fmt.Sprintf("p%d", rapid.IntRange(0, 3).Draw(rt, "prefix"))}
			req.PrefixTokens = rapid.IntRange(0, req.PromptTokens).Draw(rt, "prefix_tokens")
			c.SubmitAt(context.Background(), req, Key{Seq: uint64(i)}, at, func(Result) { ended++ })
		}
		for {
			next, ok := c.Next()
			if !ok {
				break
			}
			c.Settle(next)
		}
		require.Equal(rt, n, ended, "every request ended")
		require.Empty(rt, bad)
		st := c.Stats()
		for i := range st.Workers {
			hs, err := c.CachedBlocks(i)
			require.NoError(rt, err)
			want := map[kv.SeqHash]bool{}
			for _, h := range hs {
				want[h] = true
			}
			got := map[kv.SeqHash]bool{}
			if i < len(sets) {
				got = sets[i]
			}
			require.Equal(rt, want, got, "worker %d (%s rank %d): the events' set is the cache's", i, st.Workers[i].Name, st.Workers[i].DPRank)
		}
	})
	assert.Positive(t, stored)
	assert.Positive(t, removed, "some runs evicted")
	assert.Positive(t, restored, "some blocks were stored again")
}

// checkKVTokens checks p's token ids against its Stored events: bs ids per
// block, in order, whose chained hash is the block's hash, and the same
// ids as tokensOf holds for a block stored before (counted in restored).
// It returns what is wrong, or "".
func checkKVTokens(p KVPass, bs int, tokensOf map[kv.SeqHash][]uint32, restored *int) string {
	toks := p.Tokens
	for _, ev := range p.Events {
		if ev.Kind != kv.Stored {
			continue
		}
		if len(toks) < len(ev.Blocks)*bs {
			return fmt.Sprintf("worker %d: %d token ids left for %d blocks of %d", p.Worker, len(toks), len(ev.Blocks), bs)
		}
		parent, has := ev.Parent, ev.HasParent
		for _, b := range ev.Blocks {
			ids := toks[:bs:bs]
			toks = toks[bs:]
			local := kv.HashTokens(ids)
			h := kv.SeqHash(local)
			if has {
				h = kv.ChainHash(parent, local)
			}
			if h != b.Hash || local != b.TokensHash {
				return fmt.Sprintf("worker %d: block %x: its token ids %v hash to %x", p.Worker, b.Hash, ids, h)
			}
			if prev, ok := tokensOf[h]; ok {
				*restored++
				if !slices.Equal(prev, ids) {
					return fmt.Sprintf("block %x stored with ids %v, then %v", h, prev, ids)
				}
			} else {
				tokensOf[h] = slices.Clone(ids)
			}
			parent, has = b.Hash, true
		}
	}
	if len(toks) != 0 {
		return fmt.Sprintf("worker %d: %d token ids past the stored blocks", p.Worker, len(toks))
	}
	return ""
}
