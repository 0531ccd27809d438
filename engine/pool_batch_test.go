package engine

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvstrand/mocker/internal/cputime"
	"github.com/kvstrand/mocker/kv"
	"pgregory.net/rapid"
)

// poolPair is two pools driven through the same operations, one block at
// a time and in batches, which must stay identical.
type poolPair struct {
	one, batch *blockPool
}

// ranked is p's blocks with each inactive block's LRU position replaced
// by its rank in the LRU, from 1.
func ranked(p *blockPool) []pblock {
	out := slices.Clone(p.blocks)
	for i := range out {
		out[i].lruPos = 0
	}
	for r, s := range p.lruOrder() {
		out[s].lruPos = uint32(r + 1)
	}
	return out
}

// equalPools reports the first difference between a and b: blocks, free
// list, LRU order, counters, index lookups and recorded events.
//
// LRU positions are compared as ranks: a batch makes room in the ring
// before it starts, where blocks one at a time compact it when it is
// full, so the ring's numbering may differ, never its order.
func equalPools(rt *rapid.T, a, b *blockPool) {
	if ba, bb := ranked(a), ranked(b); !slices.Equal(ba, bb) {
		rt.Fatalf("blocks differ:\n%v\n%v", ba, bb)
	}
	if !slices.Equal(a.free, b.free) {
		rt.Fatalf("free lists differ: %v, %v", a.free, b.free)
	}
	if oa, ob := a.lruOrder(), b.lruOrder(); !slices.Equal(oa, ob) {
		rt.Fatalf("LRU orders differ: %v, %v", oa, ob)
	}
	if a.active != b.active || a.inactive != b.inactive || a.heldOnly != b.heldOnly || a.index.n != b.index.n {
		rt.Fatalf("counters differ: %d %d %d %d, %d %d %d %d", a.active, a.inactive, a.heldOnly, a.index.n,
			b.active, b.inactive, b.heldOnly, b.index.n)
	}
	if a.visible != b.visible || a.vl.freshVisible != b.vl.freshVisible || !slices.Equal(a.vl.gone, b.vl.gone) {
		rt.Fatalf("views differ: visible %d fresh %d gone %v, visible %d fresh %d gone %v",
			a.visible, a.vl.freshVisible, a.vl.gone, b.visible, b.vl.freshVisible, b.vl.gone)
	}
	for i := range a.blocks {
		h := a.blocks[i].hash
		sa, oka := a.lookup(h)
		sb, okb := b.lookup(h)
		if sa != sb || oka != okb {
			rt.Fatalf("lookup %x: %d %v, %d %v", uint64(h), sa, oka, sb, okb)
		}
	}
	ea, eb := a.ev.flush(nil), b.ev.flush(nil)
	if len(ea) != len(eb) {
		rt.Fatalf("%d events, %d batched", len(ea), len(eb))
	}
	for i := range ea {
		x, y := ea[i], eb[i]
		if x.ID != y.ID || x.Kind != y.Kind || x.Parent != y.Parent || x.HasParent != y.HasParent ||
			!slices.Equal(x.Blocks, y.Blocks) || !slices.Equal(x.RemovedHashes, y.RemovedHashes) {
			rt.Fatalf("event %d differs:\n%+v\n%+v", i, x, y)
		}
	}
	for _, p := range []*blockPool{a, b} {
		if err := p.audit(); err != nil {
			rt.Fatal(err)
		}
	}
}

// TestPool_BatchedMatchesPerBlock drives two pools with random sequences
// of requests, one through alloc, store, hold, release and releaseHold
// block by block, the other through allocN, storeRun, holdAll, releaseAll
// and releaseHoldAll, and checks they never differ in any block, list,
// counter, index entry or event. Hashes come from a small space so that
// runs hit duplicates and prefix hits revive inactive blocks.
func TestPool_BatchedMatchesPerBlock(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 24).Draw(rt, "blocks")
		emit := rapid.Bool().Draw(rt, "emit")
		pp := poolPair{newBlockPool(n, emit), newBlockPool(n, emit)}
		type req struct {
			slots []int32
			held  bool
		}
		var reqs []req
		// A request's blocks are a path in a small tree of prompts, hashed
		// as prompts are (chainTree), so that runs hit duplicates and
		// prefix hits revive inactive blocks. Its stores may start at any
		// depth past its hits, with its parent block then unknown.
		var tree chainTree
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1: // a request: prefix hits, then fresh blocks, then stores
				locals, seqs := tree.path(rt, "prompt")
				var slots []int32
				hit := int32(noSlot)
				for j := range rapid.IntRange(0, min(3, len(seqs))).Draw(rt, "hits") {
					if hit = pp.one.step(hit, seqs[j]); hit == noSlot {
						break
					}
					if s, _ := pp.one.lookup(seqs[j]); s != hit {
						rt.Fatalf("the walk finds block %d for hash %x, a scan %d", hit, uint64(seqs[j]), s)
					}
					pp.one.acquire(hit)
					pp.batch.acquire(hit)
					slots = append(slots, hit)
				}
				want := rapid.IntRange(0, n+2).Draw(rt, "alloc")
				got := len(slots)
				for range want {
					s, ok := pp.one.alloc()
					if !ok {
						break
					}
					slots = append(slots, s)
				}
				batched := pp.batch.allocN(slices.Clone(slots[:got]), want)
				if !slices.Equal(batched, slots) {
					rt.Fatalf("allocN gave %v, alloc one by one %v", batched, slots)
				}
				fresh := slots[got:]
				from := rapid.IntRange(got, len(seqs)).Draw(rt, "from")
				stores := rapid.IntRange(0, min(len(fresh), len(seqs)-from)).Draw(rt, "stores")
				parent := int32(noSlot)
				if from == got && got > 0 {
					parent = slots[got-1]
				}
				p := parent
				for i := range stores {
					pp.one.storeAt(fresh[i], seqs, locals, from+i, p)
					p = fresh[i]
				}
				pp.batch.storeRun(fresh[:stores], seqs, locals, from, parent)
				reqs = append(reqs, req{slots: slots})
			case 2: // a request becomes a hold
				if len(reqs) == 0 {
					continue
				}
				r := &reqs[rapid.IntRange(0, len(reqs)-1).Draw(rt, "hold")]
				if r.held {
					continue
				}
				for _, s := range r.slots {
					pp.one.hold(s)
				}
				pp.batch.holdAll(r.slots)
				r.held = true
			case 3, 4: // a request ends, its blocks released tail first
				if len(reqs) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(reqs)-1).Draw(rt, "end")
				r := reqs[i]
				for j := len(r.slots) - 1; j >= 0; j-- {
					if r.held {
						pp.one.releaseHold(r.slots[j])
					} else {
						pp.one.release(r.slots[j])
					}
				}
				if r.held {
					pp.batch.releaseHoldAll(r.slots)
				} else {
					pp.batch.releaseAll(r.slots)
				}
				reqs = append(reqs[:i], reqs[i+1:]...)
			}
			equalPools(rt, pp.one, pp.batch)
		}
	})
}

// BenchmarkPoolChurn is a prefill worker's pool under a stream of prompts
// that miss the prefix cache: each request allocates 63 blocks of a full
// pool (evicting as many), stores 62 new hashes, holds them, and the
// oldest of 32 holds is released. batched uses the pool's batch
// operations, single the same operations block by block. cpu-ns/op is the
// process's CPU time per request, steadier than wall time on a shared
// machine.
func BenchmarkPoolChurn(b *testing.B) {
	const (
		total  = 4096
		blocks = 63
		holds  = 32
	)
	for _, batched := range []bool{false, true} {
		name := "single"
		if batched {
			name = "batched"
		}
		b.Run(name, func(b *testing.B) {
			p := newBlockPool(total, true)
			rng := rand.New(rand.NewPCG(1, 2))
			hashes := make([]kv.SeqHash, blocks-1)
			locals := make([]kv.LocalHash, blocks-1)
			ring := make([][]int32, holds)
			var evs []kv.Event
			step := func(i int) {
				r := ring[i%holds]
				if len(r) > 0 {
					if batched {
						p.releaseHoldAll(r)
					} else {
						for j := len(r) - 1; j >= 0; j-- {
							p.releaseHold(r[j])
						}
					}
				}
				for j := range hashes {
					hashes[j] = kv.SeqHash(rng.Uint64())
					locals[j] = kv.LocalHash(hashes[j])
				}
				r = r[:0]
				if batched {
					r = p.allocN(r, blocks)
					p.storeRun(r[:blocks-1], hashes, locals, 0, noSlot)
					p.holdAll(r)
				} else {
					for range blocks {
						s, _ := p.alloc()
						r = append(r, s)
					}
					prev := int32(noSlot)
					for j := range hashes {
						p.storeAt(r[j], hashes, locals, j, prev)
						prev = r[j]
					}
					for _, s := range r {
						p.hold(s)
					}
				}
				ring[i%holds] = r
				evs = p.ev.flush(evs[:0])
				p.ev.reset()
			}
			// Fill the pool and its LRU before timing.
			for i := range 4 * total / blocks {
				step(i)
			}
			b.ReportAllocs()
			cpu0 := cputime.Self()
			b.ResetTimer()
			for i := range b.N {
				step(i)
			}
			b.StopTimer()
			if cpu := cputime.Self() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
