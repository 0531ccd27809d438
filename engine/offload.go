package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// hostTier is a bounded tier below the GPU pool, KVBM's G2 (host memory:
// the hashes of blocks the GPU pool's prefix cache evicted) or G3 (disk:
// a copy of those the host tier took in), kept in LRU order. Holding a
// hash stands for holding the block's KV: since a sequence hash is chained
// from its parent's, a run of held hashes from a prompt's first missing
// block on is a prefix the worker can copy back (onboard) instead of
// recomputing it.
//
// Entries live in fixed slices named by slot, linked into a list from the
// least to the most recently used; the map finds a hash's slot. Its size
// never exceeds the capacity it was built with.
type hostTier struct {
	slots map[kv.SeqHash]int32
	hash  []kv.SeqHash
	prev  []int32
	next  []int32
	// head is the least recently used slot, tail the most; noSlot when
	// empty.
	head, tail int32
	// pinned marks the slots a pass is about to onboard from: put does
	// not drop them to make room. npinned counts them. pinned is sized on
	// first use: most tiers never pin.
	pinned  []bool
	npinned int
	// offloaded counts the blocks the tier took in (a hash already held is
	// refreshed, not counted), dropped those it evicted to make room,
	// onboarded those copied back to the GPU pool.
	offloaded, dropped, onboarded uint64
}

func newHostTier(capacity int) *hostTier {
	return &hostTier{
		slots: make(map[kv.SeqHash]int32, capacity),
		hash:  make([]kv.SeqHash, 0, capacity),
		prev:  make([]int32, 0, capacity),
		next:  make([]int32, 0, capacity),
		head:  noSlot,
		tail:  noSlot,
	}
}

// len is how many blocks the tier holds.
func (t *hostTier) len() int { return len(t.slots) }

// capacity is the most blocks it holds.
func (t *hostTier) capacity() int { return cap(t.hash) }

func (t *hostTier) detach(s int32) {
	p, n := t.prev[s], t.next[s]
	if p != noSlot {
		t.next[p] = n
	} else {
		t.head = n
	}
	if n != noSlot {
		t.prev[n] = p
	} else {
		t.tail = p
	}
}

func (t *hostTier) append(s int32) {
	t.prev[s], t.next[s] = t.tail, noSlot
	if t.tail != noSlot {
		t.next[t.tail] = s
	} else {
		t.head = s
	}
	t.tail = s
}

// put files h as the most recently used block, evicting the least recently
// used one not pinned when the tier is full. It reports whether h is new to
// the tier (one it already held is only refreshed) and, when it evicted
// one, the hash it dropped. A full tier whose every block is pinned takes
// nothing in.
func (t *hostTier) put(h kv.SeqHash) (added bool, dropped kv.SeqHash, didDrop bool) {
	if t.refresh(h) {
		return false, 0, false
	}
	return t.insert(h)
}

// refresh marks h, if the tier holds it, the most recently used block, and
// reports whether it does.
func (t *hostTier) refresh(h kv.SeqHash) bool {
	s, ok := t.slots[h]
	if ok {
		t.touchSlot(s)
	}
	return ok
}

// holds reports whether the tier holds h, changing nothing.
func (t *hostTier) holds(h kv.SeqHash) bool {
	_, ok := t.slots[h]
	return ok
}

// offer files h as the most recently used block unless the tier holds it
// already, which it leaves where it is (KVBM's presence filter: a block
// already held is not copied again). It reports as put does.
func (t *hostTier) offer(h kv.SeqHash) (added bool, dropped kv.SeqHash, didDrop bool) {
	if _, ok := t.slots[h]; ok {
		return false, 0, false
	}
	return t.insert(h)
}

func (t *hostTier) insert(h kv.SeqHash) (added bool, dropped kv.SeqHash, didDrop bool) {
	var s int32
	if len(t.hash) < cap(t.hash) {
		t.offloaded++
		s = int32(len(t.hash))
		t.hash = append(t.hash, h)
		t.prev = append(t.prev, noSlot)
		t.next = append(t.next, noSlot)
	} else {
		s = t.head
		for t.npinned > 0 && s != noSlot && t.pinned[s] {
			s = t.next[s]
		}
		if s == noSlot {
			return false, 0, false
		}
		t.offloaded++
		t.detach(s)
		dropped, didDrop = t.hash[s], true
		delete(t.slots, dropped)
		t.dropped++
		t.hash[s] = h
	}
	t.slots[h] = s
	t.append(s)
	return true, dropped, didDrop
}

func (t *hostTier) touchSlot(s int32) {
	if s != t.tail {
		t.detach(s)
		t.append(s)
	}
}

// held counts the hashes of hs, from the first, that the tier holds. It
// changes nothing: a pass that goes on to onboard them pins them first and
// marks them used (take) once the pass has scheduled them.
func (t *hostTier) held(hs []kv.SeqHash) int {
	for i, h := range hs {
		if _, ok := t.slots[h]; !ok {
			return i
		}
	}
	return len(hs)
}

// pin keeps the blocks of hs, all held, from being dropped until unpin or
// take.
func (t *hostTier) pin(hs []kv.SeqHash) {
	if len(t.pinned) < len(t.hash) {
		t.pinned = append(t.pinned, make([]bool, cap(t.hash)-len(t.pinned))...)
	}
	for _, h := range hs {
		t.pinned[t.slots[h]] = true
	}
	t.npinned += len(hs)
}

// unpin undoes pin(hs), leaving the blocks where they were in the LRU
// order: a pass that pinned them and then could not schedule them read
// nothing from the tier.
func (t *hostTier) unpin(hs []kv.SeqHash) {
	for _, h := range hs {
		t.pinned[t.slots[h]] = false
	}
	t.npinned -= len(hs)
}

// take unpins the blocks of hs, pinned, and marks them the most recently
// used, in order: they were copied out of the tier.
func (t *hostTier) take(hs []kv.SeqHash) {
	for _, h := range hs {
		s := t.slots[h]
		t.pinned[s] = false
		t.touchSlot(s)
	}
	t.npinned -= len(hs)
}

// run counts the hashes of hs, from the first, that the tier holds, and
// marks them the most recently used, in order.
func (t *hostTier) run(hs []kv.SeqHash) int {
	n := t.held(hs)
	for _, h := range hs[:n] {
		t.touchSlot(t.slots[h])
	}
	return n
}

// objectTier is KVBM's G4, object storage: the hashes of every block the
// host tier took in, unbounded. Nothing ever leaves it.
type objectTier struct {
	held map[kv.SeqHash]struct{}
	// offloaded counts the blocks it took in, onboarded those a prefix
	// hit staged back.
	offloaded, onboarded uint64
}

func newObjectTier() *objectTier {
	return &objectTier{held: make(map[kv.SeqHash]struct{})}
}

// holds reports whether the tier holds h.
func (t *objectTier) holds(h kv.SeqHash) bool {
	_, ok := t.held[h]
	return ok
}

// offer stores h unless held already, and reports whether it was new.
func (t *objectTier) offer(h kv.SeqHash) bool {
	if _, ok := t.held[h]; ok {
		return false
	}
	t.held[h] = struct{}{}
	t.offloaded++
	return true
}

// run counts the hashes of hs, from the first, that the tier holds.
func (t *objectTier) run(hs []kv.SeqHash) int {
	for i, h := range hs {
		if _, ok := t.held[h]; !ok {
			return i
		}
	}
	return len(hs)
}

// audit checks the list against the map.
func (t *hostTier) audit() error {
	n := 0
	for s, last := t.head, int32(noSlot); s != noSlot; last, s = s, t.next[s] {
		if t.prev[s] != last {
			return fmt.Errorf("host tier: slot %d's prev is %d, want %d", s, t.prev[s], last)
		}
		if got, ok := t.slots[t.hash[s]]; !ok || got != s {
			return fmt.Errorf("host tier: slot %d's hash not mapped to it", s)
		}
		if n++; n > len(t.slots) {
			return fmt.Errorf("host tier: list longer than its %d entries", len(t.slots))
		}
	}
	if n != len(t.slots) || len(t.slots) > t.capacity() {
		return fmt.Errorf("host tier: list has %d entries, map %d, capacity %d", n, len(t.slots), t.capacity())
	}
	pins := 0
	for _, p := range t.pinned {
		if p {
			pins++
		}
	}
	if pins != 0 || t.npinned != 0 {
		return fmt.Errorf("host tier: %d slots pinned (count %d) between passes", pins, t.npinned)
	}
	return nil
}

// offload hands the evicted blocks to the host tier. Without a timed
// copy (no link) they are filed at once; with one, a block the tier holds
// already is refreshed there at once, one already on its way is left to
// its copy, and the others are sent over the link, to be filed when their
// batch lands (landOffloads), their GPU slots lent to the copy until then.
func (p *blockPool) offload(blocks []pblock, evicted []int32) {
	hs := p.tierEvicted[:0]
	for _, s := range evicted {
		hs = append(hs, blocks[s].hash)
	}
	p.tierEvicted = hs
	if p.link == nil {
		p.file(p.clock, hs)
		return
	}
	sent := p.link.sendNew(p.clock, hs, p.g2.refresh)
	// The blocks sent keep their slots until their batch lands (lend);
	// sent is hs's subsequence, so one walk pairs each with its slot.
	j := 0
	for i, s := range evicted {
		if j < len(sent) && hs[i] == sent[j] {
			p.lent[sent[j]] = s
			p.lentSlot[s] = true
			j++
		}
	}
}

// timeOffload times the copies into the host tier: each block takes ms
// over the link, batches are at most batch blocks, as many under way at
// once. The slots of the blocks sent are lent to their copies.
func (p *blockPool) timeOffload(ms float64, batch int) {
	p.link = newOffloadLink(ms, batch, batch)
	p.lent = make(map[kv.SeqHash]int32)
	p.lentSlot = make([]bool, len(p.blocks))
}

// withhold drops from dst[from:], the slots allocN has just evicted, those
// lent to a copy in flight, and returns it: the allocation stops short of
// them, as KVBM's does when the slot it would take is the source of a copy
// not yet landed. withheld counts the slots it dropped.
func (p *blockPool) withhold(dst []int32, from int) []int32 {
	keep := dst[:from]
	for _, s := range dst[from:] {
		if !p.lentSlot[s] {
			keep = append(keep, s)
		}
	}
	p.withheld = len(dst) - len(keep)
	return keep
}

// reclaim frees the slots lent to the copies of hs, which have landed:
// they go back to the free list, released.
func (p *blockPool) reclaim(hs []kv.SeqHash) {
	for _, h := range hs {
		s := p.lent[h]
		delete(p.lent, h)
		p.lentSlot[s] = false
		p.blocks[s] = pblock{}
		p.free = append(p.free, s)
	}
	p.active -= len(hs)
	p.released += uint64(len(hs))
}

// auditLent checks that the slots lent are those of the blocks in flight
// on link, one each, marked, and taken by nothing else: one reference,
// no hash indexed, out of the LRU.
func (p *blockPool) auditLent() error {
	if len(p.lent) != len(p.link.inflight) {
		return fmt.Errorf("%d GPU slots lent, %d blocks in flight to the host tier", len(p.lent), len(p.link.inflight))
	}
	marked := 0
	for _, m := range p.lentSlot {
		if m {
			marked++
		}
	}
	if marked != len(p.lent) {
		return fmt.Errorf("%d GPU slots marked lent, %d lent", marked, len(p.lent))
	}
	for h, s := range p.lent {
		if _, ok := p.link.inflight[h]; !ok || !p.lentSlot[s] {
			return fmt.Errorf("GPU slot %d lent to block %x, not in flight or not marked", s, uint64(h))
		}
		if b := &p.blocks[s]; b.ref != 1 || b.held != 0 || b.indexed() || b.lruPos != 0 {
			return fmt.Errorf("GPU slot %d lent with ref %d held %d indexed %v", s, b.ref, b.held, b.indexed())
		}
	}
	return nil
}

// land files a batch of the host tier's link that landed at at, first
// freeing the GPU slots its blocks held.
func (p *blockPool) land(at float64, hs []kv.SeqHash) {
	p.reclaim(hs)
	p.file(at, hs)
}

// nextLanding is when the next batch holding GPU slots lands, if any: a
// worker whose requests wait for those slots wakes then.
func (p *blockPool) nextLanding() (float64, bool) {
	if len(p.lent) == 0 {
		return 0, false
	}
	return p.link.nextLanding()
}

// landingDue runs the host tier's link to now and reports whether a batch
// holding GPU slots landed by then: the next pass files it and frees them.
func (p *blockPool) landingDue(now float64) bool {
	if len(p.lent) == 0 {
		return false
	}
	n := len(p.link.ready)
	p.link.advance(now)
	return len(p.link.ready) > n
}

// landOffloads files the blocks whose copy down a tier has landed by now,
// each link's in the order they landed: the host tier's first, whose
// blocks go on down to the disk tier and object storage from when they
// landed. A pass calls it first, so that its prefix walks and its KV events
// see them.
func (p *blockPool) landOffloads(now float64) {
	if l := p.link; l != nil {
		l.advance(now)
		l.take(p.land)
	}
	if l := p.link3; l != nil {
		l.advance(now)
		l.take(p.fileG3)
	}
	if l := p.link4; l != nil {
		l.advance(now)
		l.take(p.fileG4)
	}
}

// file moves blocks evicted from the GPU pool into the host tier at time
// at. Each block it takes in is announced stored on the CPU medium, after
// the block it dropped to make room, if any, is announced removed from it:
// the GPU Removed event the pool recorded and these make the move G1 to
// G2. The blocks the host tier took in are then copied on to the disk
// tier, if any, and to object storage, if on (KVBM's G2 to G3 and G2 to G4
// pipelines, which follow its G1 to G2 offload), at once or over their
// links; a block one of them holds already, or has on its way, is not
// copied again.
func (p *blockPool) file(at float64, hs []kv.SeqHash) {
	added := p.fileTier(p.g2.put, kv.MediumCPU, hs, p.tierAdded[:0], true)
	p.tierAdded = added
	if p.g3 != nil {
		if p.link3 != nil {
			p.link3.sendNew(at, added, p.g3.holds)
		} else {
			p.fileG3(at, added)
		}
	}
	if p.g4 != nil {
		if p.link4 != nil {
			p.link4.sendNew(at, added, p.g4.holds)
		} else {
			p.fileG4(at, added)
		}
	}
}

// fileTier stores hs in a bounded tier with store (its put or offer),
// announcing on m each block it takes in, after the block it dropped to
// make room, if any, removed. With collect it appends those it took in to
// added, and returns it.
func (p *blockPool) fileTier(store func(kv.SeqHash) (bool, kv.SeqHash, bool), m kv.Medium, hs, added []kv.SeqHash, collect bool) []kv.SeqHash {
	for _, h := range hs {
		in, dropped, didDrop := store(h)
		if didDrop {
			p.ev.removedTier(m, dropped)
		}
		if in {
			p.ev.storedTier(m, h)
			if collect {
				added = append(added, h)
			}
		}
	}
	return added
}

// fileG3 copies blocks into the disk tier, announced on the DISK medium.
func (p *blockPool) fileG3(_ float64, hs []kv.SeqHash) {
	p.fileTier(p.g3.offer, kv.MediumDisk, hs, nil, false)
}

// fileG4 copies blocks into object storage, announcing each it takes in
// stored on the EXTERNAL medium.
func (p *blockPool) fileG4(_ float64, hs []kv.SeqHash) {
	for _, h := range hs {
		if p.g4.offer(h) {
			p.ev.storedTier(kv.MediumExternal, h)
		}
	}
}

// tierRun is where a prompt's blocks past its GPU hits are found in the
// tiers below: the first g2 in the host tier, the g3 after them on disk,
// the g4 after those in object storage (KVBM's lookup takes one run from
// each tier in that order).
type tierRun struct{ g2, g3, g4 int }

func (r tierRun) total() int { return r.g2 + r.g3 + r.g4 }

// lookupTiers finds the run of hs (a prompt's blocks past its GPU hits)
// the tiers hold and pins the host and disk tiers' part of it, so that the
// pass's own evictions cannot drop them before it copies them;
// releaseTiers or onboardTiers undoes the pins.
func (p *blockPool) lookupTiers(hs []kv.SeqHash) tierRun {
	var r tierRun
	r.g2 = p.g2.held(hs)
	p.g2.pin(hs[:r.g2])
	rest := hs[r.g2:]
	if p.g3 != nil {
		r.g3 = p.g3.held(rest)
		p.g3.pin(rest[:r.g3])
		rest = rest[r.g3:]
	}
	if p.g4 != nil {
		r.g4 = p.g4.run(rest)
	}
	return r
}

// releaseTiers unpins lookupTiers's run r of hs for a pass that did not
// schedule it: the tiers are as they were.
func (p *blockPool) releaseTiers(hs []kv.SeqHash, r tierRun) {
	p.g2.unpin(hs[:r.g2])
	if r.g3 > 0 {
		p.g3.unpin(hs[r.g2 : r.g2+r.g3])
	}
}

// onboardTiers copies lookupTiers's run r of hs back for a pass that
// scheduled it. The host tier's blocks are marked used; the disk tier's and
// object storage's are staged through the host tier, as KVBM stages them:
// marked used where they were found and stored in the host tier, with its
// events, on their way to the GPU.
func (p *blockPool) onboardTiers(hs []kv.SeqHash, r tierRun) {
	p.g2.take(hs[:r.g2])
	p.g2.onboarded += uint64(r.g2)
	staged := hs[r.g2:r.total()]
	if r.g3 > 0 {
		p.g3.take(staged[:r.g3])
		p.g3.onboarded += uint64(r.g3)
	}
	if r.g4 > 0 {
		p.g4.onboarded += uint64(r.g4)
	}
	p.fileTier(p.g2.put, kv.MediumCPU, staged, nil, false)
}
