package engine

import (
	"slices"

	"github.com/kvstrand/mocker/kv"
)

// KVView reads a worker's prefix cache as a router fed the worker's KV
// events sees it: what the events delivered so far have put in the
// router's index. An in-process cluster asks it instead of replaying every
// Stored and Removed block into an index, and gets the same answers, barring
// a collision of 64-bit block hashes.
//
// The view and the cache differ in two ways, both kept by the cache as it
// goes. A pass's stores and evictions reach a router as events at the
// pass's End, so while the pass is in flight the router does not have
// them yet. And a router drops a Stored event whose parent block it does
// not hold (see indexer.ErrUnknownParent): the blocks of such an event are
// hidden from it for as long as the cache keeps them. (vLLM's pool can
// store a block whose parent it evicted; SGLang's radix tree cannot.)
//
// The view holds for a worker whose cache changes only during its passes,
// which is every worker that announces blocks: a prefill or aggregated
// worker with prefix caching on. Worker.KVView offers no other.
type KVView struct {
	c viewedCache
}

// viewedCache is a cache KVView reads: vLLM's block pool or SGLang's radix
// cache.
type viewedCache interface {
	// depth is KVView.Depth: a block counts while the cache holds it, a
	// router fed all its events does too (not hidden), and, with
	// inFlight, the last pass did not store it; or while, with inFlight,
	// the last pass evicted it from a router that held it (goneHas).
	depth(seqs []kv.SeqHash, inFlight bool) int
	// routed is how many blocks a router fed all its events holds.
	routed() int
	log() *viewLog
}

// KVView returns the worker's view of its prefix cache, or false when it
// has none to offer: a worker that announces no blocks (a decode worker,
// prefix caching off).
func (w *Worker) KVView() (KVView, bool) {
	switch s := w.sched.(type) {
	case *VLLM:
		if s.caching && !s.decodeWorker {
			return KVView{c: s.pool}, true
		}
	case *SGLang:
		if s.caching && !s.decodeWorker {
			return KVView{c: s.cache}, true
		}
	}
	return KVView{}, false
}

// Depth is how many leading blocks of seqs the router holds for the
// worker. inFlight says whether the worker's last pass is still in
// flight, its events not delivered yet.
func (x KVView) Depth(seqs []kv.SeqHash, inFlight bool) int { return x.c.depth(seqs, inFlight) }

// Blocks is how many blocks the router holds for the worker; inFlight as
// for Depth.
func (x KVView) Blocks(inFlight bool) int {
	n := x.c.routed()
	if inFlight {
		l := x.c.log()
		n += len(l.gone) - l.freshVisible
	}
	return n
}

// Outside counts the changes to the worker's cache made outside a pass,
// which a view cannot place in time; a worker KVView is offered for makes
// none, and tests check it.
func (x KVView) Outside() int { return x.c.log().outside }

// viewLog is what a cache keeps for KVView about its last pass, whose
// events a router may not have yet: the pass's number (each cached block
// records the number of the pass that stored it, fresh while that is the
// number here), the hashes the pass evicted that a router held from
// before it, and how many blocks it stored that a router will hold. gone
// is a set once it is long: goneSet holds its first goneIn hashes. inPass
// is set during a pass; outside counts cache changes made outside one.
// scans counts the pass's questions answered by scanning gone, before the
// set is built.
//
// goneBits has a bit set for each of the first bitsIn hashes in gone
// (goneBit), and others that share theirs: a hash whose bit is clear is
// not among them. A router asks about a handful of hashes during a pass
// that evicts hundreds, and most are not in gone, so most answers need
// neither the list nor the set, which is then built only for a pass where
// a bit says maybe. The bits are set when a router first asks, so a pass
// nobody asks about (a decode worker's: routers walk the prefill side's
// caches) costs an append per eviction.
type viewLog struct {
	pass         uint32
	gone         []kv.SeqHash
	goneSet      kv.Index[struct{}]
	goneIn       int
	goneBits     *[goneWords]uint64
	bitsIn       int
	scans        int // goneHas's scans of gone this pass
	freshVisible int
	inPass       bool
	outside      int
}

// goneWords is goneBits' size in words: 8,192 bits, so that a pass that
// evicts 400 blocks a router held leaves 95% of them clear.
const goneWords = 128

// goneBit is h's word in goneBits and its bit there. The bits are h's
// highest: its lowest place it in the caches' tables.
func goneBit(h kv.SeqHash) (word int, bit uint64) {
	return int(uint64(h) >> (64 - 13) >> 6), 1 << (uint64(h) >> (64 - 13) & 63)
}

// passTop is the first pass number never used.
const passTop = 1 << 31

func newViewLog() viewLog { return viewLog{pass: 1, goneBits: new([goneWords]uint64)} }

// begin starts a pass, numbering it. It reports whether the numbers
// wrapped: the cache must then clear every block's, so that none passes
// for fresh. Pass numbers stay below passTop, which leaves the vLLM
// pool a bit of its blocks' stamps.
func (l *viewLog) begin() (wrapped bool) {
	l.pass++
	if l.pass == passTop {
		l.pass, wrapped = 1, true
	}
	// Deleted one by one: clearing the set's table would cost its size,
	// that of the longest gone list yet, every pass. So are the bits,
	// while that is cheaper than clearing them all: a few hashes' worth,
	// since the words clear a cache line at a time.
	for _, h := range l.gone[:l.goneIn] {
		l.goneSet.Delete(h)
	}
	if l.bitsIn < goneWords/16 {
		for _, h := range l.gone[:l.bitsIn] {
			w, _ := goneBit(h)
			l.goneBits[w] = 0
		}
	} else {
		clear(l.goneBits[:])
	}
	l.gone, l.goneIn, l.bitsIn, l.scans = l.gone[:0], 0, 0, 0
	l.freshVisible = 0
	l.inPass = true
	return wrapped
}

// end ends a pass.
func (l *viewLog) end() { l.inPass = false }

// evicted records that the cache evicted the block with hash h, stored in
// pass, which a router held or will hold.
func (l *viewLog) evicted(h kv.SeqHash, pass uint32) {
	if pass == l.pass {
		l.freshVisible--
	} else {
		l.gone = append(l.gone, h)
	}
}

// evictedAll is evicted of each of slots, blocks of blocks, that a router
// holds (not hidden), in order; it returns how many there were.
func (l *viewLog) evictedAll(blocks []pblock, slots []int32) int {
	gone := slices.Grow(l.gone, len(slots))
	pass := l.pass
	n, fresh := 0, 0
	for _, s := range slots {
		b := &blocks[s]
		if b.hidden() {
			continue
		}
		n++
		if b.pass() == pass {
			fresh++
			continue
		}
		gone = gone[:len(gone)+1]
		gone[len(gone)-1] = b.hash
	}
	l.gone = gone
	l.freshVisible -= fresh
	return n
}

// changed notes a change to the cache, counted if made outside a pass.
func (l *viewLog) changed() {
	if !l.inPass {
		l.outside++
	}
}

// goneHas reports whether the last pass evicted h while a router still
// held it from an earlier pass.
func (l *viewLog) goneHas(h kv.SeqHash) bool {
	for _, g := range l.gone[l.bitsIn:] {
		w, bit := goneBit(g)
		l.goneBits[w] |= bit
	}
	l.bitsIn = len(l.gone)
	if w, bit := goneBit(h); l.goneBits[w]&bit == 0 {
		return false
	}
	// A short list, or the first few questions a bit lets through in a
	// pass, are answered by a scan: building the set costs an insertion
	// and, at the next pass, a deletion per hash, scans of hundreds for a
	// pass asked about only once or twice.
	const scan, scans = 16, 4
	if len(l.gone) <= scan || l.scans < scans {
		l.scans++
		for _, g := range l.gone {
			if g == h {
				return true
			}
		}
		return false
	}
	for _, g := range l.gone[l.goneIn:] {
		l.goneSet.Put(g, struct{}{})
	}
	l.goneIn = len(l.gone)
	_, ok := l.goneSet.Get(h)
	return ok
}

// depth is the vLLM pool's viewedCache.depth. It walks a run of blocks
// without a call per block, and jumps along it where it can (jumpTable).
func (p *blockPool) depth(seqs []kv.SeqHash, inFlight bool) int {
	if p.jumps == nil {
		p.jumps = newJumpTable(len(p.blocks))
	}
	l, blocks, jumps, jumpN := &p.vl, p.blocks, p.jumps, p.jumpLen
	prev := int32(noSlot)
	for i := 0; i < len(seqs); {
		s := p.step(prev, seqs[i])
		held := s != noSlot && !blocks[s].hidden() && !(inFlight && blocks[s].pass() == l.pass)
		if !held && !(inFlight && l.goneHas(seqs[i])) {
			return i
		}
		prev = s
		if i++; !held {
			continue
		}
		// Along the run, while the router holds each block: any other
		// block goes back to the step above. A block in a run is hidden
		// as the block before it is (audit checks it), so not here. Nor
		// is a block its pass's below a jump's end that is not the last
		// pass's: a block is stored no earlier than the one it follows.
		// From anchor, walked counts the blocks walked one by one.
		anchor, walked := prev, 0
		for i < len(seqs) {
			if walked == 0 {
				if j, ok := jumps.from(prev); ok {
					if e := i - 1 + int(j.n); e < len(seqs) && blocks[j.to].hash == seqs[e] &&
						!(inFlight && blocks[j.to].pass() == l.pass) {
						prev, anchor, i = j.to, j.to, e+1
						jumps.taken++
						continue
					}
				}
			}
			n := blocks[prev].next1 - 1
			if n == noSlot || blocks[n].hash != seqs[i] {
				break
			}
			if inFlight && blocks[n].pass() == l.pass {
				break
			}
			prev = n
			i++
			if walked++; walked == jumpN {
				jumps.set(anchor, prev, walked)
				anchor, walked = prev, 0
			}
		}
	}
	return len(seqs)
}

func (p *blockPool) routed() int   { return p.visible }
func (p *blockPool) log() *viewLog { return &p.vl }

// depth is the radix cache's viewedCache.depth: a router holds every
// node the tree does.
func (c *radixCache) depth(seqs []kv.SeqHash, inFlight bool) int {
	l := &c.vl
	for i, h := range seqs {
		if s, ok := c.index.Get(h); ok && !(inFlight && c.stamp[s] == l.pass) {
			continue
		}
		if inFlight && l.goneHas(h) {
			continue
		}
		return i
	}
	return len(seqs)
}

func (c *radixCache) routed() int   { return c.inTree }
func (c *radixCache) log() *viewLog { return &c.vl }
