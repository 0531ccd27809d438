package router_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
)

// seqOf returns the blocks of a synthetic sequence: a prefix shared by every
// sequence of group g, then a suffix unique to (worker, j).
func seqOf(g, worker, j, prefix, n int) []kv.Block {
	out := make([]kv.Block, n)
	var parent kv.SeqHash
	for i := range n {
		l := kv.LocalHash(uint64(g)<<32 | uint64(i))
		if i >= prefix {
			l = kv.LocalHash(1<<62 | uint64(worker)<<40 | uint64(j)<<16 | uint64(i))
		}
		s := kv.SeqHash(l)
		if i > 0 {
			s = kv.ChainHash(parent, l)
		}
		out[i] = kv.Block{Hash: s, TokensHash: l}
		parent = s
	}
	return out
}

// BenchmarkKVRoute measures one kv-mode decision plus its load bookkeeping
// (Route then Free) over 64 workers whose index holds about 1,000,000
// blocks, for a 64-block prompt that a handful of workers share half of and
// one worker holds whole.
func BenchmarkKVRoute(b *testing.B) {
	const (
		workers   = 64
		seqs      = 244 // per worker: 244 × 64 × 64 ≈ 1M blocks
		blocks    = 64
		prefix    = 32
		groups    = 1000
		blockSize = 16
	)
	cfg := router.DefaultConfig()
	cfg.Mode, cfg.BlockSize = router.ModeKV, blockSize
	r, err := router.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for w := range workers {
		if err := r.AddWorker(router.WorkerInfo{ID: uint64(w + 1), Role: router.RoleAggregated, TotalBlocks: 1 << 20}); err != nil {
			b.Fatal(err)
		}
		for j := range seqs {
			r.KVEvent(uint64(w+1), kv.Event{Kind: kv.Stored, Blocks: seqOf((w*7+j)%groups, w, j, prefix, blocks)})
		}
	}
	if n := r.Stats().Index.IndexedBlocks; n < 990_000 {
		b.Fatalf("index holds %d blocks, want about 1M", n)
	}
	// Worker 0's sequence j=0 is in group 0: the prompt matches it whole.
	target := seqOf(0, 0, 0, prefix, blocks)
	req := router.Request{PromptTokens: blocks * blockSize}
	for _, blk := range target {
		req.LocalHashes = append(req.LocalHashes, blk.TokensHash)
		req.SeqHashes = append(req.SeqHashes, blk.Hash)
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("req-", i)
	}
	runtime.GC() // the index build leaves garbage that is not the decision's
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req.ID = ids[i%len(ids)]
		w, err := routeByID(r, &req)
		if err != nil || w != 1 {
			b.Fatalf("routed to %d, %v; want worker 1", w, err)
		}
		freeByID(r, req.ID)
	}
}
