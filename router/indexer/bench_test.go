package indexer

import (
	"slices"
	"testing"

	"github.com/kvstrand/mocker/kv"
)

// BenchmarkApplyStored measures applying one Stored event of 16 new blocks,
// chained under the worker's previous event as an engine extends a
// sequence, with workers taking turns. The index is rebuilt every 4096
// events (untimed) so the benchmark's memory stays bounded.
func BenchmarkApplyStored(b *testing.B) {
	const (
		workers = 64
		n       = 16
		reset   = 4096
	)
	x := New()
	evs := make([]kv.Event, reset)
	for i := range evs {
		w := i % workers
		ev := kv.Event{Kind: kv.Stored}
		var parent kv.SeqHash
		if i >= workers {
			prev := evs[i-workers].Blocks
			parent = prev[len(prev)-1].Hash
			ev.Parent, ev.HasParent = parent, true
		}
		for j := range n {
			l := kv.LocalHash(uint64(w)<<48 | uint64(i)<<8 | uint64(j))
			s := kv.SeqHash(l)
			if ev.HasParent || j > 0 {
				s = kv.ChainHash(parent, l)
			}
			ev.Blocks = append(ev.Blocks, kv.Block{Hash: s, TokensHash: l})
			parent = s
		}
		evs[i] = ev
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % reset
		if k == 0 && i > 0 {
			b.StopTimer()
			x = New()
			b.StartTimer()
		}
		if err := x.Apply(uint64(k%workers), evs[k]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFindMatches measures the tree walk alone for a 64-block query
// that 16 of 64 workers hold whole.
func BenchmarkFindMatches(b *testing.B) {
	x := New()
	locals := make([]kv.LocalHash, 64)
	for i := range locals {
		locals[i] = kv.LocalHash(i + 1)
	}
	blocks := chain(locals...)
	for w := range uint64(64) {
		_ = x.Apply(w, stored(blocks[:16+int(w%4)*16]))
	}
	var dst []Score
	b.ReportAllocs()
	for b.Loop() {
		dst = x.FindMatches(locals, false, dst[:0])
	}
	if len(dst) != 64 {
		b.Fatalf("got %d scores", len(dst))
	}
}

// BenchmarkApplyChurn measures the event stream of full pools cycling
// through a fixed set of prompts, as a saturated cluster's workers send
// it: each of 4 workers of 4,096 blocks stores a prompt of 62 blocks (one
// of 256, a 15-block prefix shared by a quarter of them) in one event and,
// when full, first evicts its least recently stored prompts' own blocks in
// one event. An op is one event. The stream is replayed from an empty index
// each time it runs out (untimed).
func BenchmarkApplyChurn(b *testing.B) {
	const (
		workers  = 4
		capacity = 4096
		prompts  = 256
		blocks   = 62
		prefix   = 15
		steps    = 1 << 16
	)
	chains := make([][]kv.Block, prompts)
	own := make([][]kv.SeqHash, prompts)
	for p := range chains {
		var parent kv.SeqHash
		for j := range blocks {
			l := kv.LocalHash(uint64(p%4)<<40 | uint64(j) + 1)
			if j >= prefix {
				l = kv.LocalHash(uint64(p+1)<<20 | uint64(j))
			}
			s := kv.SeqHash(l)
			if j > 0 {
				s = kv.ChainHash(parent, l)
			}
			chains[p] = append(chains[p], kv.Block{Hash: s, TokensHash: l})
			if j >= prefix {
				own[p] = append(own[p], s)
			}
			parent = s
		}
	}
	type step struct {
		worker uint64
		ev     kv.Event
	}
	var stream []step
	held := make([][]int, workers) // prompts per worker, oldest first
	used := make([]int, workers)
	rng := uint64(1)
	for len(stream) < steps {
		rng = rng*6364136223846793005 + 1442695040888963407
		w, p := int(rng>>60)%workers, int(rng>>33)%prompts
		if slices.Contains(held[w], p) {
			continue
		}
		var evict []kv.SeqHash
		for used[w]+blocks-prefix > capacity-4*prefix {
			old := held[w][0]
			held[w] = held[w][1:]
			evict = append(evict, own[old]...)
			used[w] -= blocks - prefix
		}
		if len(evict) > 0 {
			stream = append(stream, step{uint64(w), kv.Event{Kind: kv.Removed, RemovedHashes: evict}})
		}
		stream = append(stream, step{uint64(w), kv.Event{Kind: kv.Stored, Blocks: chains[p]}})
		held[w] = append(held[w], p)
		used[w] += blocks - prefix
	}
	x := New()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % len(stream)
		if k == 0 && i > 0 {
			b.StopTimer()
			x = New()
			b.StartTimer()
		}
		if err := x.Apply(stream[k].worker, stream[k].ev); err != nil {
			b.Fatal(err)
		}
	}
}
