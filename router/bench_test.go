package router_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvstrand/mocker/internal/cputime"
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

// BenchmarkRouteFleet measures one routing decision plus its bookkeeping
// (a route, and the free of the request routed 16 before it, so 16 stay in
// flight) in each mode, over 4 registered workers and over 256, in the same
// run: what a route costs as a fleet grows by workers that hold no request.
// The prompts are 64 blocks whose first 24 are one of 32 shared prefixes,
// and the first 4 workers hold those prefixes in the index at both sizes,
// so the index is the same and only the registered workers differ.
func BenchmarkRouteFleet(b *testing.B) {
	const (
		blocks    = 64
		prefix    = 24
		groups    = 32
		blockSize = 16
		inflight  = 16
		prompts   = 256
	)
	reqs := make([]router.Request, prompts)
	for i := range reqs {
		seq := seqOf(i%groups, 1000+i, i, prefix, blocks)
		r := &reqs[i]
		r.ID = fmt.Sprint("req-", i)
		r.PromptTokens = blocks * blockSize
		for _, blk := range seq {
			r.LocalHashes = append(r.LocalHashes, blk.TokensHash)
			r.SeqHashes = append(r.SeqHashes, blk.Hash)
		}
	}
	for _, mode := range router.Modes {
		for _, workers := range []int{4, 256} {
			b.Run(fmt.Sprintf("mode=%s/workers=%d", mode, workers), func(b *testing.B) {
				cfg := router.DefaultConfig()
				cfg.Mode, cfg.BlockSize, cfg.Seed = mode, blockSize, 1
				r, err := router.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				for w := range workers {
					if err := r.AddWorker(router.WorkerInfo{ID: uint64(w + 1), Role: router.RoleAggregated, TotalBlocks: 1 << 16}); err != nil {
						b.Fatal(err)
					}
				}
				for w := range 4 {
					for g := range groups {
						r.KVEvent(uint64(w+1), kv.Event{Kind: kv.Stored, Blocks: seqOf(g, w, g, prefix, prefix)})
					}
				}
				var ring [inflight]router.Lease
				used := make(map[uint64]bool)
				runtime.GC()
				b.ReportAllocs()
				cpu0 := cputime.Self()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					r.FreeLease(ring[i%inflight])
					id, l, err := r.RouteLease(&reqs[i%prompts])
					if err != nil {
						b.Fatal(err)
					}
					ring[i%inflight] = l
					used[id] = true
				}
				b.StopTimer()
				if cpu := cputime.Self() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
				if r.InFlight() != min(b.N, inflight) {
					b.Fatalf("%d requests in flight, want %d", r.InFlight(), min(b.N, inflight))
				}
				b.ReportMetric(float64(len(used)), "workers-used")
			})
		}
	}
}
