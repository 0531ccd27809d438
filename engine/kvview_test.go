package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router/indexer"
	"pgregory.net/rapid"
)

// chainTree names blocks by their path in a small tree of token blocks:
// locals from a three-letter alphabet, sequence hashes chained as a
// router chains them, so that a path's blocks are a real prompt's.
type chainTree struct{}

func (chainTree) path(rt *rapid.T, label string) ([]kv.LocalHash, []kv.SeqHash) {
	n := rapid.IntRange(1, 7).Draw(rt, label+"_len")
	locals := make([]kv.LocalHash, n)
	seqs := make([]kv.SeqHash, n)
	for i := range n {
		locals[i] = kv.LocalHash(rapid.IntRange(1, 3).Draw(rt, label))
		if i == 0 {
			seqs[i] = kv.SeqHash(locals[i])
		} else {
			seqs[i] = kv.ChainHash(seqs[i-1], locals[i])
		}
	}
	return locals, seqs
}

// TestKVView_MatchesIndexFedThePoolsEvents drives a pool through passes of
// random stores (runs at any depth of a prompt, so parents may be missing
// or evicted, and copies of one block may be stored twice), evictions and
// releases, and checks the view against an index fed the pool's events at
// each pass's End: during the pass (inFlight, the events still to come) and
// after it, for every prompt of the tree, in depth and in blocks held.
func TestKVView_MatchesIndexFedThePoolsEvents(t *testing.T) {
	var checked, hidden, inFlightDiffers, jumped int
	rapid.Check(t, func(rt *rapid.T) {
		p := newBlockPool(rapid.IntRange(1, 16).Draw(rt, "blocks"), true)
		// Jumps short enough for the tree's paths.
		p.jumpLen = rapid.IntRange(1, 4).Draw(rt, "jump_len")
		view := KVView{c: p}
		defer func() {
			if p.jumps != nil {
				jumped += int(p.jumps.taken)
			}
		}()
		index := indexer.New()
		const id = 1
		var tree chainTree
		var reqs [][]int32
		check := func(inFlight bool, when string) {
			if got, want := view.Blocks(inFlight), index.TreeSize(id); got != want {
				rt.Fatalf("%s: view holds %d blocks, index %d", when, got, want)
			}
			for range 6 {
				locals, seqs := tree.path(rt, "query")
				want := 0
				for _, s := range index.FindMatches(locals, false, nil) {
					want = s.Depth
				}
				if got := view.Depth(seqs, inFlight); got != want {
					rt.Fatalf("%s: view depth %d, index %d, for %v", when, got, want, seqs)
				}
				if inFlight && view.Depth(seqs, false) != want {
					inFlightDiffers++
				}
				checked++
			}
		}
		for range rapid.IntRange(1, 12).Draw(rt, "passes") {
			p.beginPass()
			p.ev.reset()
			for range rapid.IntRange(0, 5).Draw(rt, "ops") {
				if len(reqs) > 0 && rapid.IntRange(0, 2).Draw(rt, "op") == 0 {
					i := rapid.IntRange(0, len(reqs)-1).Draw(rt, "release")
					p.releaseAll(reqs[i])
					reqs = append(reqs[:i], reqs[i+1:]...)
					continue
				}
				locals, seqs := tree.path(rt, "store")
				from := rapid.IntRange(0, len(seqs)-1).Draw(rt, "from")
				slots := p.allocN(nil, len(seqs)-from)
				p.storeRun(slots, seqs, locals, from, noSlot)
				reqs = append(reqs, slots)
			}
			p.vl.end()
			for i := range p.blocks {
				if b := &p.blocks[i]; b.indexed() && b.hidden() {
					hidden++
				}
			}
			check(true, "pass in flight")
			for _, ev := range p.ev.flush(nil) {
				_ = index.Apply(id, ev)
			}
			check(false, "pass delivered")
			if err := p.audit(); err != nil {
				rt.Fatal(err)
			}
		}
	})
	if checked == 0 || hidden == 0 || inFlightDiffers == 0 || jumped == 0 {
		t.Fatalf("compared %d answers, met %d hidden blocks, %d depths a pass in flight changed and took %d jumps: want all four",
			checked, hidden, inFlightDiffers, jumped)
	}
	t.Logf("compared %d answers, met %d hidden blocks, %d depths a pass in flight changed, took %d jumps", checked, hidden, inFlightDiffers, jumped)
}

// TestKVView_PassNumbersWrap: a block the pool stored long ago is not
// taken for fresh when the pool's pass numbers wrap round to the one it was
// stored in.
func TestKVView_PassNumbersWrap(t *testing.T) {
	p := newBlockPool(4, true)
	view := KVView{c: p}
	p.beginPass()
	stored := p.vl.pass
	p.storeRun(p.allocN(nil, 1), []kv.SeqHash{7}, []kv.LocalHash{7}, 0, noSlot)
	// A block whose parent no router holds is hidden, and stays so when
	// the numbers wrap.
	p.storeRun(p.allocN(nil, 1), []kv.SeqHash{8, 9}, []kv.LocalHash{8, 9}, 1, noSlot)
	p.vl.end()
	if got := view.Depth([]kv.SeqHash{7}, true); got != 0 {
		t.Fatalf("in flight: depth %d, want 0 (the store's event is still to come)", got)
	}
	// The pass numbers run round to the block's again.
	p.vl.pass = passTop - 1
	for range stored + 1 {
		p.beginPass()
		p.vl.end()
		if got, blocks := view.Depth([]kv.SeqHash{7}, true), view.Blocks(true); got != 1 || blocks != 1 {
			t.Fatalf("pass %d, the block stored in pass %d: depth %d, blocks %d in flight; want 1 and 1",
				p.vl.pass, stored, got, blocks)
		}
	}
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}
}

// TestKVView_JumpsEndWhereARunIsCut: a jump along a run is not taken once
// a block between its ends is evicted, though both ends stay: the run is
// cut there, and the walk stops at the block evicted.
func TestKVView_JumpsEndWhereARunIsCut(t *testing.T) {
	p := newBlockPool(3, true) // no free block: allocations evict
	p.jumpLen = 2
	view := KVView{c: p}
	seqs := []kv.SeqHash{1, kv.ChainHash(1, 2), kv.ChainHash(kv.ChainHash(1, 2), 3)}
	locals := []kv.LocalHash{1, 2, 3}
	p.beginPass()
	slots := p.allocN(nil, 3)
	p.storeRun(slots, seqs, locals, 0, noSlot)
	p.vl.end()
	for i := range 2 {
		if got := view.Depth(seqs, false); got != 3 {
			t.Fatalf("walk %d: depth %d, want 3", i, got)
		}
	}
	if p.jumps.taken != 1 {
		t.Fatalf("took %d jumps, want the one the first walk left", p.jumps.taken)
	}
	// Only the middle block goes inactive, and is evicted.
	p.beginPass()
	p.acquire(slots[0])
	p.acquire(slots[2])
	p.releaseAll(slots)
	if got := p.allocN(nil, 1); len(got) != 1 || got[0] != slots[1] {
		t.Fatalf("allocated %v, want the middle block %d", got, slots[1])
	}
	p.vl.end()
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}
	if got := view.Depth(seqs, false); got != 1 {
		t.Fatalf("depth %d after the middle block's eviction, want 1", got)
	}
}

// BenchmarkKVView_DepthLongPrompts asks a pool of 16,384 blocks how deep
// Mooncake-shaped prompts go (about 480 blocks of 16 tokens, 15 trace
// blocks of 512 tokens; runs of 32 alike), as a router asks each prefill
// worker at every arrival: a walk from block to block (walk) against one
// that jumps along runs where an earlier walk went (jump). The prompts
// share a system prompt and their conversations' histories; the pool's
// slots are scattered, as evictions leave them.
func BenchmarkKVView_DepthLongPrompts(b *testing.B) {
	const (
		total  = 16384
		bs     = 16
		trace  = 512 / bs
		convs  = 24
		blocks = 15 * trace
	)
	rng := rand.New(rand.NewPCG(3, 5))
	prompts := make([][]kv.SeqHash, convs)
	for c := range prompts {
		locals := make([]kv.LocalHash, 0, blocks)
		for k := range blocks / trace {
			id := kv.LocalHash(1000*(c+1) + k)
			if k < 2 {
				id = kv.LocalHash(k + 1) // the system prompt
			}
			for range trace {
				locals = append(locals, id)
			}
		}
		seqs := make([]kv.SeqHash, len(locals))
		for i, l := range locals {
			if i == 0 {
				seqs[i] = kv.SeqHash(l)
			} else {
				seqs[i] = kv.ChainHash(seqs[i-1], l)
			}
		}
		prompts[c] = seqs
	}
	for _, mode := range []string{"walk", "jump"} {
		b.Run(mode, func(b *testing.B) {
			p := newBlockPool(total, true)
			if mode == "walk" {
				p.jumpLen = 1 << 30
			}
			rng.Shuffle(len(p.free), func(i, j int) { p.free[i], p.free[j] = p.free[j], p.free[i] })
			p.beginPass()
			for _, seqs := range prompts {
				slots := p.allocN(nil, len(seqs))
				p.storeRun(slots, seqs, make([]kv.LocalHash, len(seqs)), 0, noSlot)
			}
			p.vl.end()
			view := KVView{c: p}
			n := 0
			for b.Loop() {
				n += view.Depth(prompts[rng.IntN(convs)], false)
			}
			b.ReportMetric(float64(n)/float64(b.N), "blocks/op")
		})
	}
}
