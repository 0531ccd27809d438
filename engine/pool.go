package engine

import (
	"fmt"
	"slices"

	"github.com/kvstrand/mocker/kv"
)

// noSlot is no block or node (the radix cache's links, an allocation that
// found every block active).
const noSlot = -1

// pblock is one physical KV block. Blocks live in a slice and are named by
// their index, so the hot paths never allocate per block. A block is 32
// bytes, two to a cache line: none straddles two lines, so a pass over a
// request's blocks reads one line per block.
type pblock struct {
	hash kv.SeqHash
	ref  int32 // all references, holds included
	held int32 // references that are holds
	// lruPos is the block's position in the inactive LRU while it is
	// inactive, 0 otherwise.
	lruPos uint32
	// run places the block among the indexed ones (see blockPool):
	//   - 0: private, never indexed (a partial tail, a duplicate, any
	//     block with prefix caching off); it goes straight back to the
	//     free list;
	//   - > 0: indexed, following block run-1 in its run;
	//   - runRoot: indexed, the head of a run and a sequence's first block;
	//   - runRoot-1-k: indexed, the head of a run that is not a sequence's
	//     first block, counted in blockPool.forks[k].
	run int32
	// next1 is the slot plus one of the block that follows this one in
	// its run, 0 for none.
	next1 int32
	// stamp is the pool's pass that stored the block, with hiddenBit set
	// when a router fed the pool's events drops the block's (its Stored
	// event names a parent the router does not hold), so never learns of
	// it. The block is fresh, its event perhaps not with a router yet,
	// while its pass is the pool's. See KVView.
	stamp uint32
}

const (
	runRoot   = -1
	hiddenBit = passTop // above every pass number
)

// indexed reports whether the block is the pool's copy of its hash,
// findable by prefix matching.
func (b *pblock) indexed() bool { return b.run != 0 }

// head reports whether the block heads a run; follows is the block it
// follows when it does not.
func (b *pblock) head() bool     { return b.run < 0 }
func (b *pblock) follows() int32 { return b.run - 1 }

// fork is the block's counter in blockPool.forks, or -1 for none.
func (b *pblock) fork() int { return int(runRoot - 1 - b.run) }

func (b *pblock) hidden() bool { return b.stamp&hiddenBit != 0 }
func (b *pblock) pass() uint32 { return b.stamp &^ hiddenBit }

// blockPool is a refcounted block pool with an inactive LRU of refcount-0
// blocks that still serve prefix hits. Counters are kept incrementally and
// audit recounts them from scratch.
//
// The indexed blocks form runs: a block stored right after the indexed
// copy of its parent hash follows it in its run (the parent's next1, its
// run), unless another block follows the parent already. Only the first
// block of a run is in the hash index. A sequence hash names its parent
// (it is chained from it), so the indexed copy of a prompt's block j is
// the block after the indexed copy of its block j-1 or the head of a run:
// a prefix walk (step) goes from block to block and consults the index
// only where a run ends or forks. A request's blocks are mostly one run,
// so storing and evicting them costs the index an entry or two, not one
// per block. A run loses blocks from its tail (a child leaves the LRU no
// later than its parent); a block evicted from the middle makes the rest
// a run of its own, whose head enters the index.
//
// Most of a walk's index probes would find nothing: storing a block asks
// whether its hash is indexed already, and a fresh block's hash is not.
// So the heads that are not a sequence's first block (a fork, or a run cut
// from its parent) are counted by their parent hash, in forks, by a few
// bits of it: where none is counted under the parent's bucket, the block
// after the parent's is the only indexed child the parent can have, and
// step answers without probing the index.
//
// The LRU is a ring of slots in the order they became inactive, positions
// counting up from 1 without end: the entry at position q is
// lru[q&lruMask], and it stands for its block while the block's lruPos is
// q. A block revived by a prefix hit leaves a stale entry behind, which
// eviction skips and compaction drops. Eviction reads the ring in order
// and the blocks it names independently of each other, where a linked list
// would chase one block's link to find the next: a full pool evicts a
// request's worth of blocks at a time, and those reads' cache misses now
// overlap.
type blockPool struct {
	blocks  []pblock
	free    []int32
	index   slotIndex
	lru     []int32
	lruMask uint32
	// Positions [lruHead, lruTail) of the ring are in use; the least
	// recently used inactive block is the first valid entry from lruHead.
	lruHead  uint32
	lruTail  uint32
	active   int
	inactive int
	heldOnly int // blocks with ref > 0 whose every reference is a hold
	// released counts the blocks that stopped being referenced,
	// allocated those allocN handed out, stores the runs stored that
	// indexed a block (a duplicate, left private, changes no prefix
	// walk). While watching, watch filters the block hashes of prompts
	// (see lackWatch), and watchStores counts the runs stored that indexed
	// a block that may be one of them.
	released    uint64
	allocated   uint64
	stores      uint64
	watchStores uint64
	watching    bool
	watch       [watchWords]uint64

	ev kvRecorder
	// vl is what KVView needs to answer as a router fed ev's events
	// would; visible counts the blocks such a router holds, those indexed
	// and not hidden. They hold only while viewed: a pool that announces
	// no blocks (a decode worker's) offers no view, and its evictions and
	// passes skip the log (its stores still count visible, unread). viewed
	// is not ev.emit, which a worker told to omit its events turns off
	// while still offering the view.
	vl      viewLog
	visible int
	viewed  bool

	// slow holds allocN's evicted blocks that need unlink.
	slow []int32

	// g2 is the host tier the evicted blocks go to, nil without one
	// (num_g2_blocks 0). g3 (disk, num_g3_blocks) and g4 (object
	// storage, enable_g4_storage), nil when off, take a copy of each
	// block g2 takes in from the pool; tierAdded is the scratch list of
	// those blocks.
	g2        *hostTier
	g3        *hostTier
	g4        *objectTier
	tierAdded []kv.SeqHash
	// link times the copy of evicted blocks into g2, nil when it takes no
	// time (no tier, kv_bytes_per_token unset or bandwidth_g1_to_g2_gbps
	// 0): they are filed as they are evicted. link3 and link4 time the
	// copies on from g2 into g3 and g4 alike. timed says one of them is
	// set. clock is the time the pool's allocations happen at, for the
	// links; tierEvicted is scratch.
	link, link3, link4 *offloadLink
	timed              bool
	clock              float64
	tierEvicted        []kv.SeqHash
	// lent maps each block in flight on link to the GPU slot it still
	// holds, lentSlot marks those slots, and withheld counts those allocN
	// last held back from its caller: a slot evicted for a timed copy is
	// taken (active, referenced by no request) until the copy lands. nil
	// without link.
	lent     map[kv.SeqHash]int32
	lentSlot []bool
	withheld int

	// forks counts the heads of runs that are not a sequence's first
	// block, by their parent hash's forkBucket. A counter that reaches
	// forkFull stays there, and its bucket is probed for good.
	forks [forkBuckets]uint16

	// jumps are depth's jumps along runs, nil until it is first asked;
	// jumpLen is how many blocks one crosses (jumpLen, less in tests).
	jumps   *jumpTable
	jumpLen int
}

// forkBuckets is how many counters blockPool.forks has. At a kilobyte the
// table stays in cache beside the walks that read it, and a pool's heads,
// usually dozens, leave most counters at 0.
const (
	forkBits    = 9
	forkBuckets = 1 << forkBits
	forkFull    = 1<<16 - 1
)

// forkBucket is parent's counter in blockPool.forks: its top bits (the
// index places hashes by their low bits).
func forkBucket(parent kv.SeqHash) uint16 { return uint16(uint64(parent) >> (64 - forkBits)) }

// newBlockPool builds a pool of total blocks. announce says whether it
// announces its blocks (KV events, a view): a decode worker's, or one with
// prefix caching off, does not.
func newBlockPool(total int, announce bool) *blockPool {
	// Room for twice the blocks, so that a compaction, which leaves at
	// most every block, frees at least half the ring.
	ring := 1
	for ring < 2*total {
		ring <<= 1
	}
	p := &blockPool{
		blocks:  make([]pblock, total),
		free:    make([]int32, total),
		index:   newSlotIndex(total / 16),
		lru:     make([]int32, ring),
		lruMask: uint32(ring - 1),
		lruHead: 1,
		lruTail: 1,
		ev:      kvRecorder{emit: announce},
		vl:      newViewLog(),
		viewed:  announce,
		jumpLen: jumpLen,
	}
	// Hand out low slots first; purely cosmetic but keeps dumps readable.
	for i := range p.free {
		p.free[i] = int32(total - 1 - i)
	}
	return p
}

// step is the indexed block of h, whose parent hash's indexed block is
// prev (noSlot when h has no parent or its parent is not indexed), or
// noSlot when h is not indexed.
func (p *blockPool) step(prev int32, h kv.SeqHash) int32 {
	if prev != noSlot {
		b := &p.blocks[prev]
		if n := b.next1 - 1; n != noSlot && p.blocks[n].hash == h {
			return n
		}
		// Any other indexed block of h heads a run, counted under prev's
		// hash, its parent hash.
		if p.forks[forkBucket(b.hash)] == 0 {
			return noSlot
		}
	}
	if s, ok := p.index.get(h, p.blocks); ok {
		return s
	}
	return noSlot
}

// prefix appends to dst the indexed blocks of the longest prefix of hashes,
// a sequence's block hashes from its first, that the pool holds, and
// counts those referenced (active): a walk of step from block to block.
// Along a run the walk calls nothing.
func (p *blockPool) prefix(hashes []kv.SeqHash, dst []int32) (_ []int32, active int) {
	dst = slices.Grow(dst, len(hashes))
	blocks := p.blocks
	s := int32(noSlot)
	for i := 0; i < len(hashes); {
		if s = p.step(s, hashes[i]); s == noSlot {
			break
		}
		for {
			b := &blocks[s]
			if b.ref > 0 {
				active++
			}
			dst = dst[:len(dst)+1]
			dst[len(dst)-1] = s
			if i++; i == len(hashes) {
				break
			}
			n := b.next1 - 1
			if n == noSlot || blocks[n].hash != hashes[i] {
				break // where the run ends, or forks: step asks the index
			}
			s = n
		}
	}
	return dst, active
}

// cachedAt is the indexed block of hashes[j], a prompt's block hashes, or
// noSlot: the walk of step from its first block.
func (p *blockPool) cachedAt(hashes []kv.SeqHash, j int) int32 {
	s := int32(noSlot)
	for _, h := range hashes[:j+1] {
		s = p.step(s, h)
	}
	return s
}

// unlink takes indexed block s, about to be evicted, out of its run. The
// blocks after it, if any, become a run of their own.
func (p *blockPool) unlink(s int32) {
	b := &p.blocks[s]
	if b.head() {
		p.index.removeSlot(b.hash, s)
		if k := b.fork(); k >= 0 && p.forks[k] != forkFull {
			p.forks[k]--
		}
	} else {
		p.blocks[b.follows()].next1 = 0
	}
	if b.next1 != 0 {
		if p.jumps != nil {
			p.jumps.cuts++
		}
		n := b.next1 - 1
		p.addHead(n, p.blocks[n].hash, b.hash, true)
	}
}

// addHead indexes block s, which holds h, as the head of a run. Unless it
// is a sequence's first block (hasParent false), it is counted in forks
// under parent, its parent hash.
func (p *blockPool) addHead(s int32, h, parent kv.SeqHash, hasParent bool) {
	p.index.add(h, s, p.blocks)
	if !hasParent {
		p.blocks[s].run = runRoot
		return
	}
	k := forkBucket(parent)
	if p.forks[k] != forkFull {
		p.forks[k]++
	}
	p.blocks[s].run = runRoot - 1 - int32(k)
}

// lruRemove takes inactive block s out of the LRU. Its entry goes stale,
// unless it is the newest, which is dropped: a prefix hit usually revives
// the blocks a request released last.
func (p *blockPool) lruRemove(s int32) {
	b := &p.blocks[s]
	if b.lruPos != 0 && b.lruPos == p.lruTail-1 {
		p.lruTail--
	}
	b.lruPos = 0
}

// lruCompact drops the stale entries of a full ring, moving the valid ones
// up towards the head in order. They are at most every block, so at least
// half the ring comes free.
func (p *blockPool) lruCompact() {
	w := p.lruHead
	for q := p.lruHead; q < p.lruTail; q++ {
		s := p.lru[q&p.lruMask]
		if b := &p.blocks[s]; b.lruPos == q {
			p.lru[w&p.lruMask] = s
			b.lruPos = w
			w++
		}
	}
	p.lruTail = w
}

// lruMakeRoomFor makes room for n blocks to become inactive, which are
// active now: places in the ring, and positions below lruTop. A
// compaction leaves at most the inactive blocks, so room for every other
// block.
func (p *blockPool) lruMakeRoomFor(n int) {
	if int(p.lruTail-p.lruHead)+n > len(p.lru) {
		p.lruCompact()
	}
	if uint64(p.lruTail)+uint64(n) > lruTop {
		p.lruRenumber()
	}
}

// lruTop is the first LRU position never used: positions are 32 bits,
// and 0 is none.
const lruTop = 1<<32 - 1

// lruRenumber moves the inactive blocks to positions from 1 on, in order,
// so that the positions in use never reach lruTop. It runs once every
// four billion blocks made inactive.
func (p *blockPool) lruRenumber() {
	order := p.lruOrder()
	p.lruHead, p.lruTail = 1, 1
	for _, s := range order {
		p.lru[p.lruTail&p.lruMask] = s
		p.blocks[s].lruPos = p.lruTail
		p.lruTail++
	}
}

// lruOldest is the least recently used inactive block, of which there
// must be one; the stale entries before it are dropped.
func (p *blockPool) lruOldest() int32 {
	for {
		if s := p.lru[p.lruHead&p.lruMask]; p.blocks[s].lruPos == p.lruHead {
			return s
		}
		p.lruHead++
	}
}

// lruOrder is the inactive blocks, least recently used first.
func (p *blockPool) lruOrder() []int32 {
	var out []int32
	for q := p.lruHead; q < p.lruTail; q++ {
		if s := p.lru[q&p.lruMask]; p.blocks[s].lruPos == q {
			out = append(out, s)
		}
	}
	return out
}

// acquire adds a reference to an indexed block found by a prefix hit,
// reviving it from the inactive LRU if needed.
func (p *blockPool) acquire(s int32) {
	b := &p.blocks[s]
	switch {
	case b.ref == 0:
		p.lruRemove(s)
		p.inactive--
		p.active++
	case b.held == b.ref:
		p.heldOnly--
	}
	b.ref++
}

// allocN appends up to n fresh private blocks to dst, each with one
// reference, and returns it: the blocks n calls of alloc would return, in
// the same order, with the same evictions and Removed events. It stops
// short when every block is active, or when the slots of blocks it evicted
// are lent to their copy to the host tier (withhold).
//
// Evictions take a stretch of the LRU from its head.
func (p *blockPool) allocN(dst []int32, n int) []int32 {
	// Room for every block first: the loops below call nothing, so the
	// compiler keeps their variables in registers.
	dst = slices.Grow(dst, n)
	blocks := p.blocks
	if p.lent != nil {
		p.withheld = 0
	}
	if k := min(n, len(p.free)); k > 0 {
		top := len(p.free) - 1
		for i := range k {
			s := p.free[top-i]
			blocks[s] = pblock{ref: 1}
			dst = dst[:len(dst)+1]
			dst[len(dst)-1] = s
		}
		p.free = p.free[:top+1-k]
		p.active += k
		p.allocated += uint64(k)
		n -= k
	}
	if n = min(n, p.inactive); n <= 0 {
		return dst
	}
	// The LRU's first n live entries, written in place: dst has room.
	start := len(dst)
	evicted := dst[start : start+n]
	lru, mask, q := p.lru, p.lruMask, p.lruHead
	for i := 0; i < len(evicted); q++ {
		s := lru[q&mask]
		if blocks[s].lruPos != q {
			continue // revived since it was filed
		}
		evicted[i] = s
		i++
	}
	dst = dst[:start+n]
	p.lruHead = q
	p.inactive -= n
	p.active += n
	p.allocated += uint64(n)
	if removed := p.ev.removedRun(n); removed != nil {
		for i, s := range evicted {
			removed[i] = blocks[s].hash
		}
	}
	if p.viewed {
		p.visible -= p.vl.evictedAll(blocks, evicted)
	}
	if p.g2 != nil {
		p.offload(blocks, evicted)
	}
	// Most evicted blocks end their run (a child leaves the LRU no later
	// than its parent): the block before them then does. The others wait
	// for unlink, after the loop.
	if p.jumps != nil {
		gen := p.jumps.gen
		for _, s := range evicted {
			gen[s]++
		}
	}
	slow := slices.Grow(p.slow[:0], n)
	for _, s := range evicted {
		if b := &blocks[s]; b.run > 0 && b.next1 == 0 {
			blocks[b.run-1].next1 = 0
			*b = pblock{ref: 1}
		} else {
			slow = slow[:len(slow)+1]
			slow[len(slow)-1] = s
		}
	}
	for _, s := range slow {
		p.unlink(s)
		blocks[s] = pblock{ref: 1}
	}
	p.slow = slow
	p.vl.changed()
	if p.lent != nil {
		dst = p.withhold(dst, start)
	}
	return dst
}

// releaseAll drops one non-hold reference from each of slots, last slot
// first, as that many calls of release would: a sequence's tail enters the
// inactive LRU before its prefix, so it is evicted first.
func (p *blockPool) releaseAll(slots []int32) {
	// The ring is made room for first, so that retiring a block, written
	// out below, calls nothing: a loop that calls keeps its variables on
	// the stack. So does a loop with more of them than registers: the
	// counts follow from the ring's tail after the loop, and the free
	// list, which takes only private blocks, is reached through p.
	p.lruMakeRoomFor(len(slots))
	blocks, lru, mask := p.blocks, p.lru, p.lruMask
	tail0 := p.lruTail
	tail, heldOnly, freed := tail0, p.heldOnly, 0
	for i := len(slots) - 1; i >= 0; i-- {
		s := slots[i]
		b := &blocks[s]
		b.ref--
		switch {
		case b.ref == 0:
			if b.run != 0 { // indexed: to the LRU
				lru[tail&mask] = s
				b.lruPos = tail
				tail++
			} else { // the free list has room for every block
				n := len(p.free)
				p.free = p.free[:n+1]
				p.free[n] = s
				freed++
			}
		case b.held == b.ref:
			heldOnly++
		}
	}
	p.endRelease(tail0, tail, heldOnly, freed)
}

// endRelease ends a batch release: the LRU's tail moved from tail0 to
// tail (the blocks filed there), freed blocks went to the free list, and
// heldOnly is the count of blocks only holds reference.
func (p *blockPool) endRelease(tail0, tail uint32, heldOnly, freed int) {
	filed := int(tail - tail0)
	p.lruTail, p.heldOnly = tail, heldOnly
	p.active -= filed + freed
	p.released += uint64(filed + freed)
	p.inactive += filed
}

// holdAll turns one of the caller's references to each of slots into a
// hold.
func (p *blockPool) holdAll(slots []int32) {
	heldOnly := p.heldOnly
	for _, s := range slots {
		b := &p.blocks[s]
		b.held++
		if b.held == b.ref {
			heldOnly++
		}
	}
	p.heldOnly = heldOnly
}

// releaseHoldAll drops one hold reference from each of slots, last slot
// first, as that many calls of releaseHold would.
func (p *blockPool) releaseHoldAll(slots []int32) {
	p.lruMakeRoomFor(len(slots)) // as releaseAll
	blocks, lru, mask := p.blocks, p.lru, p.lruMask
	tail0 := p.lruTail
	tail, heldOnly, freed := tail0, p.heldOnly, 0
	for i := len(slots) - 1; i >= 0; i-- {
		s := slots[i]
		b := &blocks[s]
		if b.held == b.ref && b.ref == 1 {
			heldOnly--
		}
		b.held--
		b.ref--
		if b.ref == 0 {
			if b.run != 0 {
				lru[tail&mask] = s
				b.lruPos = tail
				tail++
			} else {
				n := len(p.free)
				p.free = p.free[:n+1]
				p.free[n] = s
				freed++
			}
		}
	}
	p.endRelease(tail0, tail, heldOnly, freed)
}

// storeRun stores blocks from..from+len(slots)-1 of a sequence whose block
// hashes (and token hashes) are hashes and locals from its first block:
// slots[i] just filled hashes[from+i]. parentSlot is the sequence's block
// from-1, or noSlot when the caller has none. Each block whose hash is
// not indexed yet becomes its indexed copy, in the run of its parent's
// indexed copy when it can follow it; the others stay private duplicates,
// as vLLM's pool keeps them. It is that many calls of store, in order.
func (p *blockPool) storeRun(slots []int32, hashes []kv.SeqHash, locals []kv.LocalHash, from int, parentSlot int32) {
	// cp is the indexed block of the parent hash, noSlot if there is none.
	cp := int32(noSlot)
	if from > 0 {
		if parentSlot != noSlot && p.blocks[parentSlot].indexed() {
			cp = parentSlot
		} else {
			cp = p.cachedAt(hashes, from-1)
		}
	}
	// chained: the previous block of the run was the last one recorded,
	// so the next one recorded joins its event.
	chained := false
	// added: the previous block was indexed here, so cp is a run's fresh
	// end. stamp is then the stamp of the blocks stored: the pass, and
	// whether a router drops their Stored event.
	added := false
	var stamp uint32
	// indexed: a block was indexed here; watched: one of them may be
	// watched.
	indexed, watched := false, false
	for i := 0; i < len(slots); i++ {
		if added {
			// Most blocks follow one stored just before.
			start := i
			i, cp = p.extendRun(slots, hashes[from:from+len(slots)], i, cp, stamp)
			if n := i - start; n > 0 {
				if chained {
					p.ev.storedNextRun(hashes[from+start:from+i], locals[from+start:from+i], from+start)
				}
				if stamp&hiddenBit == 0 {
					p.visible += n
					p.vl.freshVisible += n
				}
				if p.watching && !watched {
					watched = p.watches(hashes[from+start : from+i])
				}
			}
			if i == len(slots) {
				break
			}
		}
		s := slots[i]
		j := from + i
		h := hashes[j]
		b := &p.blocks[s]
		b.hash = h
		if d := p.step(cp, h); d != noSlot {
			chained, added = false, false
			cp = d
			continue
		}
		var parent kv.SeqHash
		if j > 0 {
			parent = hashes[j-1]
		}
		if cp != noSlot && p.blocks[cp].next1 == 0 {
			p.blocks[cp].next1, b.run = s+1, cp+1
		} else {
			p.addHead(s, h, parent, j > 0)
		}
		if chained {
			p.ev.storedNext(h, locals[j], j)
		} else {
			p.ev.stored(h, locals[j], parent, j > 0, j)
			chained = p.ev.emit
		}
		if !added {
			// A router holds the parent if it is indexed and its Stored
			// event was not dropped. A Stored event whose parent the
			// router does not hold is dropped whole, so its blocks are
			// hidden, and so are their descendants.
			stamp = p.vl.pass
			if j > 0 && (cp == noSlot || p.blocks[cp].hidden()) {
				stamp |= hiddenBit
			}
		}
		added, indexed = true, true
		if p.watching && !watched {
			w, bit := watchBit(h)
			watched = p.watch[w]&bit != 0
		}
		b.stamp = stamp
		if stamp&hiddenBit == 0 {
			p.visible++
			p.vl.freshVisible++
		}
		cp = s
	}
	if len(slots) > 0 {
		p.vl.changed()
	}
	if indexed {
		p.stores++
	}
	if watched {
		p.watchStores++
	}
}

// watches reports whether the watch filter may hold one of hs.
func (p *blockPool) watches(hs []kv.SeqHash) bool {
	for _, h := range hs {
		if w, bit := watchBit(h); p.watch[w]&bit != 0 {
			return true
		}
	}
	return false
}

// watchWords is the size of a pool's watch filter in words: 65,536 bits,
// which a prompt of 1,000 blocks (16k tokens) sets 1.5% of. A store of a
// long prompt's run checks hundreds of hashes against it: a filter the
// size of a cache line or two would let nearly every such store through.
const watchWords = 1024

// watchBit is h's word in a watch filter and its bit there, from h's
// highest bits.
func watchBit(h kv.SeqHash) (word int, bit uint64) {
	return int(uint64(h) >> 54), 1 << (uint64(h) >> 48 & 63)
}

// watchAll adds hashes to those the pool watches for stores of.
func (p *blockPool) watchAll(hashes []kv.SeqHash) {
	for _, h := range hashes {
		w, bit := watchBit(h)
		p.watch[w] |= bit
	}
	p.watching = true
}

// extendRun is storeRun's common case, from slots[i] on while it lasts:
// block cp, stored just before, is a run's fresh end, with no block after
// it, so unless a head is counted under its hash, the block of the next
// hash is not indexed (step), and the next slot follows cp. hs are the
// slots' hashes (hs[i] is slots[i]'s; i > 0) and stamp their stamp. It
// returns the first slot it did not store and the block it stored last
// (cp if none); storeRun counts and records the blocks after, so that
// this loop keeps few variables and calls nothing.
func (p *blockPool) extendRun(slots []int32, hs []kv.SeqHash, i int, cp int32, stamp uint32) (int, int32) {
	blocks, forks := p.blocks, &p.forks
	hs = hs[:len(slots)]
	for ; i < len(slots); i++ {
		if forks[forkBucket(hs[i-1])] != 0 {
			break
		}
		s := slots[i]
		b := &blocks[s]
		b.hash = hs[i]
		blocks[cp].next1, b.run = s+1, cp+1
		b.stamp = stamp
		cp = s
	}
	return i, cp
}

// beginPass starts a pass: the last pass's stores and evictions are now
// the router's, if it has all the events.
func (p *blockPool) beginPass() {
	if p.viewed && p.vl.begin() {
		for i := range p.blocks {
			p.blocks[i].stamp &= hiddenBit
		}
	}
}

// audit recounts the pool from its blocks and reports the first
// disagreement with the incremental counters or a broken conservation law.
func (p *blockPool) audit() error {
	if p.g3 != nil {
		if err := p.g3.audit(); err != nil {
			return err
		}
	}
	if p.g2 != nil {
		if err := p.g2.audit(); err != nil {
			return err
		}
	}
	for _, l := range []*offloadLink{p.link, p.link3, p.link4} {
		if l == nil {
			continue
		}
		if err := l.audit(); err != nil {
			return err
		}
	}
	if p.lent != nil {
		if err := p.auditLent(); err != nil {
			return err
		}
	}
	var active, inactive, heldOnly int
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.ref < 0 || b.held < 0 || b.held > b.ref {
			return fmt.Errorf("block %d: ref %d held %d out of range", i, b.ref, b.held)
		}
		if b.ref > 0 {
			active++
			if b.held == b.ref {
				heldOnly++
			}
		}
	}
	for _, s := range p.lruOrder() {
		if p.blocks[s].ref != 0 || !p.blocks[s].indexed() {
			return fmt.Errorf("block %d in inactive LRU with ref %d indexed %v", s, p.blocks[s].ref, p.blocks[s].indexed())
		}
		inactive++
	}
	// Every block that claims a place in the ring holds it: the ring names
	// it there, inside the positions in use.
	for i := range p.blocks {
		if q := p.blocks[i].lruPos; q != 0 && (q < p.lruHead || q >= p.lruTail || p.lru[q&p.lruMask] != int32(i)) {
			return fmt.Errorf("block %d claims LRU position %d, ring [%d, %d) has block %d there",
				i, q, p.lruHead, p.lruTail, p.lru[q&p.lruMask])
		}
	}
	switch {
	case active != p.active:
		return fmt.Errorf("active counter %d, recount %d", p.active, active)
	case inactive != p.inactive:
		return fmt.Errorf("inactive counter %d, recount %d", p.inactive, inactive)
	case heldOnly != p.heldOnly:
		return fmt.Errorf("held-only counter %d, recount %d", p.heldOnly, heldOnly)
	case active+inactive+len(p.free) != len(p.blocks):
		return fmt.Errorf("active %d + inactive %d + free %d != total %d", active, inactive, len(p.free), len(p.blocks))
	}
	var err error
	heads := 0
	p.index.each(func(s int32) bool {
		heads++
		b := &p.blocks[s]
		if got, ok := p.index.get(b.hash, p.blocks); !b.head() || !ok || got != s {
			err = fmt.Errorf("index entry for block %d (hash %x, run %d) finds block %d",
				s, uint64(b.hash), b.run, got)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	visible, freshVisible, runHeads := 0, 0, 0
	seen := make(map[kv.SeqHash]int32)
	var forks [forkBuckets]int
	for i := range p.blocks {
		s, b := int32(i), &p.blocks[i]
		if k := b.fork(); k >= forkBuckets {
			return fmt.Errorf("block %d heads a run counted in fork bucket %d, of %d", s, k, forkBuckets)
		} else if k >= 0 {
			forks[k]++
		}
		if !b.indexed() {
			if b.next1 != 0 {
				return fmt.Errorf("private block %d leads to %d", s, b.next1-1)
			}
			continue
		}
		if o, dup := seen[b.hash]; dup {
			return fmt.Errorf("blocks %d and %d both indexed under hash %x", o, s, uint64(b.hash))
		}
		seen[b.hash] = s
		if b.head() {
			runHeads++
		} else if pr := &p.blocks[b.follows()]; !pr.indexed() || pr.next1 != s+1 {
			return fmt.Errorf("block %d follows block %d, which is not indexed (%v) or leads to %d", s, b.follows(), pr.indexed(), pr.next1-1)
		} else if b.hidden() != pr.hidden() {
			// A router drops a Stored event whose parent it does not
			// hold, and the blocks after it in the event with it.
			return fmt.Errorf("block %d hidden %v follows block %d hidden %v", s, b.hidden(), b.follows(), pr.hidden())
		}
		if n := b.next1 - 1; n != noSlot && p.blocks[n].run != s+1 {
			return fmt.Errorf("block %d leads to block %d, whose run is %d", s, n, p.blocks[n].run)
		}
		if !b.hidden() {
			visible++
			if b.pass() == p.vl.pass {
				freshVisible++
			}
		}
	}
	for k := range forks {
		if forks[k] != int(p.forks[k]) && p.forks[k] != forkFull {
			return fmt.Errorf("fork bucket %d counts %d heads, %d by a recount", k, p.forks[k], forks[k])
		}
	}
	switch {
	case heads != p.index.n || runHeads != heads:
		err = fmt.Errorf("index counts %d entries, holds %d; %d runs", p.index.n, heads, runHeads)
	case p.viewed && (visible != p.visible || freshVisible != p.vl.freshVisible):
		err = fmt.Errorf("a router holds %d blocks (%d of the last pass) by the counters, %d (%d) by a recount",
			p.visible, p.vl.freshVisible, visible, freshVisible)
	}
	return err
}
