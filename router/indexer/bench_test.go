package indexer

import (
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
