package engine

import (
	"fmt"

	"github.com/kvstrand/mocker/kv"
)

// rnode is one KV page of the SGLang model's token pool. A page is either
// free, private to one request (a partial tail, a page not yet inserted, or
// any page when prefix caching is off), or a node of the radix tree. Pages
// live in a slice and are named by index, so a tree node and the page that
// stores it are the same slot and nothing is allocated per page.
type rnode struct {
	hash   kv.SeqHash
	parent int32 // noSlot for a child of the root
	kids   int32
	// lock counts the requests whose locked path runs through this node
	// (SGLang's lock_ref: locking a node locks its ancestors too); held is
	// the part of lock that belongs to holds.
	lock   int32
	held   int32
	heap   int32 // position in the evictable-leaf heap, noSlot when absent
	inTree bool
	// access orders eviction: the tick at which the node was last unlocked.
	access uint64
}

// radixCache is the SGLang model's page pool and radix cache in one. The
// tree is keyed by chained page hashes: a page's sequence hash names its
// whole prefix, so the hash index doubles as every node's child map, and a
// prefix match is a walk of the request's page hashes until the first miss.
// Unlocked leaves are evicted least recently used first; a locked node, or
// an unlocked one with children, is never evicted.
type radixCache struct {
	nodes []rnode
	free  []int32
	index kv.Index[int32]
	heap  []int32 // unlocked leaves, ordered by (access, slot)
	tick  uint64

	inTree    int // pages that are tree nodes
	evictable int // tree nodes with lock 0 (SGLang's evictable_size, in pages)
	heldOnly  int // tree nodes with lock > 0 whose every lock is a hold
	private   int // allocated pages outside the tree

	// version changes whenever a node joins or leaves the tree, evictions
	// only when one leaves: a prefix match computed at the same version is
	// still exact, and one computed with the same eviction count can only
	// have grown since.
	version   uint64
	evictions uint64

	ev kvRecorder
	// vl and stamp are what KVView needs: stamp holds, by slot, the pass
	// that stored each tree node.
	vl    viewLog
	stamp []uint32
}

func newRadixCache(total int, emit bool) *radixCache {
	c := &radixCache{
		nodes:   make([]rnode, total),
		free:    make([]int32, total),
		index:   kv.NewIndex[int32](total),
		ev:      kvRecorder{emit: emit},
		version: 1,
		vl:      newViewLog(),
		stamp:   make([]uint32, total),
	}
	for i := range c.free {
		c.free[i] = int32(total - 1 - i)
		c.nodes[i].heap = noSlot
	}
	return c
}

// protected is the number of tree pages some request has locked (SGLang's
// protected_size, in pages).
func (c *radixCache) protected() int { return c.inTree - c.evictable }

// active is every page a request references: locked tree pages and private
// pages.
func (c *radixCache) active() int { return c.protected() + c.private }

// available is what an allocation can obtain: free pages plus evictable
// tree pages.
func (c *radixCache) available() int { return len(c.free) + c.evictable }

// match walks hashes from the root until the first miss and returns the
// number of matched pages and the deepest matched node (noSlot for none).
func (c *radixCache) match(hashes []kv.SeqHash) (n int, last int32) {
	last = noSlot
	for _, h := range hashes {
		s, ok := c.index.Get(h)
		if !ok {
			break
		}
		last = s
		n++
	}
	return n, last
}

// lockCost is how many pages locking node would take out of the evictable
// set: the unlocked nodes on its path.
func (c *radixCache) lockCost(node int32) int {
	n := 0
	for s := node; s != noSlot; s = c.nodes[s].parent {
		if c.nodes[s].lock != 0 {
			break // a locked node's ancestors are locked too
		}
		n++
	}
	return n
}

// lock adds one lock to node and its ancestors, taking unlocked ones out of
// the evictable set.
func (c *radixCache) lock(node int32) {
	for n := node; n != noSlot; n = c.nodes[n].parent {
		c.addLock(n)
	}
}

// unlock drops one (non-hold) lock from node and its ancestors; nodes left
// unlocked become evictable, and unlocked leaves join the eviction heap.
func (c *radixCache) unlock(node int32) {
	if node == noSlot {
		return
	}
	c.tick++
	for n := node; n != noSlot; n = c.nodes[n].parent {
		c.dropLock(n)
	}
}

// hold turns one of the caller's locks on node's path into a hold.
func (c *radixCache) hold(node int32) {
	for n := node; n != noSlot; n = c.nodes[n].parent {
		b := &c.nodes[n]
		b.held++
		if b.held == b.lock {
			c.heldOnly++
		}
	}
}

// unhold drops one hold lock from node's path.
func (c *radixCache) unhold(node int32) {
	if node == noSlot {
		return
	}
	c.tick++
	for n := node; n != noSlot; n = c.nodes[n].parent {
		b := &c.nodes[n]
		if b.held == b.lock {
			c.heldOnly--
		}
		b.held--
		c.dropLock(n)
	}
}

// addLock adds one lock to the single node n: an unlocked node leaves the
// evictable set (and the eviction heap), a held-only one stops being so.
func (c *radixCache) addLock(n int32) {
	b := &c.nodes[n]
	switch {
	case b.lock == 0:
		c.evictable--
		if b.heap != noSlot {
			c.heapRemove(b.heap)
		}
	case b.held == b.lock:
		c.heldOnly--
	}
	b.lock++
}

// dropLock removes one lock from the single node n, whose hold count the
// caller has already adjusted. A node left unlocked becomes evictable,
// stamped with the current tick, and joins the eviction heap if it is a
// leaf; one left with only holds counts as held-only.
func (c *radixCache) dropLock(n int32) {
	b := &c.nodes[n]
	b.lock--
	switch {
	case b.lock == 0:
		c.evictable++
		b.access = c.tick
		if b.kids == 0 {
			c.heapPush(n)
		}
	case b.held == b.lock:
		c.heldOnly++
	}
}

// alloc returns a private page, evicting the least recently used unlocked
// leaf when no page is free. ok is false when nothing can be evicted.
func (c *radixCache) alloc() (int32, bool) {
	if n := len(c.free); n > 0 {
		s := c.free[n-1]
		c.free = c.free[:n-1]
		c.private++
		return s, true
	}
	if len(c.heap) == 0 {
		return noSlot, false
	}
	s := c.heap[0]
	c.evict(s)
	c.free = c.free[:len(c.free)-1] // evict pushed s; hand it out directly
	c.private++
	return s, true
}

// evict removes the unlocked leaf s from the tree and frees its page. Its
// parent becomes a leaf and, if unlocked, evictable in turn.
func (c *radixCache) evict(s int32) {
	b := &c.nodes[s]
	c.heapRemove(b.heap)
	c.index.Delete(b.hash)
	c.ev.removed(b.hash)
	c.vl.evicted(b.hash, c.stamp[s])
	c.vl.changed()
	if p := b.parent; p != noSlot {
		pb := &c.nodes[p]
		pb.kids--
		if pb.kids == 0 && pb.lock == 0 {
			c.heapPush(p)
		}
	}
	*b = rnode{parent: noSlot, heap: noSlot}
	c.inTree--
	c.evictable--
	c.version++
	c.evictions++
	c.free = append(c.free, s)
}

// release returns a private page to the free list.
func (c *radixCache) release(s int32) {
	c.nodes[s] = rnode{parent: noSlot, heap: noSlot}
	c.private--
	c.free = append(c.free, s)
}

// extend moves a lock one page down the tree: the caller holds a lock on
// parent (noSlot: the root) and owns the private page s, which stores the
// page with sequence hash h. If the tree already has h, s is a duplicate
// and is freed, and the existing node is locked instead; otherwise s
// becomes a new locked leaf under parent and a Stored event is recorded
// (h is page j of its sequence). It returns the node that now ends the
// caller's locked path.
func (c *radixCache) extend(parent, s int32, h kv.SeqHash, local kv.LocalHash, j int) int32 {
	if e, ok := c.index.Get(h); ok {
		c.release(s)
		// The caller's lock already covers e's ancestors (they are the
		// path down to parent), so only e itself gains one.
		c.addLock(e)
		return e
	}
	c.private--
	c.inTree++
	c.version++
	c.nodes[s] = rnode{hash: h, parent: parent, lock: 1, heap: noSlot, inTree: true}
	c.index.Put(h, s)
	c.stamp[s] = c.vl.pass
	c.vl.freshVisible++
	c.vl.changed()
	var ph kv.SeqHash
	if parent != noSlot {
		pb := &c.nodes[parent]
		ph = pb.hash
		if pb.kids == 0 && pb.heap != noSlot {
			c.heapRemove(pb.heap)
		}
		pb.kids++
	}
	c.ev.stored(h, local, ph, parent != noSlot, j)
	return s
}

// beginPass starts a pass: the last pass's stores and evictions are now
// the router's, if it has all the events.
func (c *radixCache) beginPass() {
	if c.vl.begin() {
		clear(c.stamp)
	}
}

// heapLess orders the eviction heap: least recently unlocked first, page
// index breaking ties so eviction is deterministic.
func (c *radixCache) heapLess(i, j int) bool {
	a, b := &c.nodes[c.heap[i]], &c.nodes[c.heap[j]]
	if a.access != b.access {
		return a.access < b.access
	}
	return c.heap[i] < c.heap[j]
}

func (c *radixCache) heapSwap(i, j int) {
	c.heap[i], c.heap[j] = c.heap[j], c.heap[i]
	c.nodes[c.heap[i]].heap = int32(i)
	c.nodes[c.heap[j]].heap = int32(j)
}

func (c *radixCache) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !c.heapLess(i, p) {
			return
		}
		c.heapSwap(i, p)
		i = p
	}
}

func (c *radixCache) heapDown(i int) {
	n := len(c.heap)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && c.heapLess(l, m) {
			m = l
		}
		if r < n && c.heapLess(r, m) {
			m = r
		}
		if m == i {
			return
		}
		c.heapSwap(i, m)
		i = m
	}
}

func (c *radixCache) heapPush(s int32) {
	c.nodes[s].heap = int32(len(c.heap))
	c.heap = append(c.heap, s)
	c.heapUp(len(c.heap) - 1)
}

func (c *radixCache) heapRemove(pos int32) {
	i := int(pos)
	last := len(c.heap) - 1
	c.nodes[c.heap[i]].heap = noSlot
	if i != last {
		c.heap[i] = c.heap[last]
		c.nodes[c.heap[i]].heap = int32(i)
	}
	c.heap = c.heap[:last]
	if i < last {
		c.heapDown(i)
		c.heapUp(i)
	}
}

// audit recounts the cache from its pages and reports the first
// disagreement with the incremental counters, a broken conservation law or
// a broken tree or heap invariant.
func (c *radixCache) audit() error {
	var inTree, evictable, heldOnly, fresh int
	kids := make([]int32, len(c.nodes))
	for i := range c.nodes {
		b := &c.nodes[i]
		if !b.inTree {
			continue
		}
		inTree++
		if c.stamp[i] == c.vl.pass {
			fresh++
		}
		if b.lock < 0 || b.held < 0 || b.held > b.lock {
			return fmt.Errorf("page %d: lock %d held %d out of range", i, b.lock, b.held)
		}
		if b.lock == 0 {
			evictable++
		} else if b.held == b.lock {
			heldOnly++
		}
		if b.parent != noSlot {
			p := &c.nodes[b.parent]
			if !p.inTree {
				return fmt.Errorf("page %d: parent %d is not in the tree", i, b.parent)
			}
			if p.lock < b.lock {
				return fmt.Errorf("page %d: lock %d above its parent's %d", i, b.lock, p.lock)
			}
			kids[b.parent]++
		}
		if s, ok := c.index.Get(b.hash); !ok || s != int32(i) {
			return fmt.Errorf("page %d: hash %x not indexed to it", i, uint64(b.hash))
		}
	}
	for i := range c.nodes {
		b := &c.nodes[i]
		if b.inTree && kids[i] != b.kids {
			return fmt.Errorf("page %d: %d children counted, %d recorded", i, kids[i], b.kids)
		}
		leaf := b.inTree && b.lock == 0 && b.kids == 0
		if leaf != (b.heap != noSlot) {
			return fmt.Errorf("page %d: evictable leaf %v but heap position %d", i, leaf, b.heap)
		}
	}
	for i := range c.heap {
		if c.nodes[c.heap[i]].heap != int32(i) {
			return fmt.Errorf("heap slot %d: page %d records position %d", i, c.heap[i], c.nodes[c.heap[i]].heap)
		}
		if i > 0 && c.heapLess(i, (i-1)/2) {
			return fmt.Errorf("heap slot %d orders before its parent", i)
		}
	}
	switch {
	case inTree != c.inTree:
		return fmt.Errorf("tree counter %d, recount %d", c.inTree, inTree)
	case fresh != c.vl.freshVisible:
		return fmt.Errorf("%d pages stored by the last pass by the counter, %d by a recount", c.vl.freshVisible, fresh)
	case evictable != c.evictable:
		return fmt.Errorf("evictable counter %d, recount %d", c.evictable, evictable)
	case heldOnly != c.heldOnly:
		return fmt.Errorf("held-only counter %d, recount %d", c.heldOnly, heldOnly)
	case c.index.Len() != inTree:
		return fmt.Errorf("index has %d entries for %d tree pages", c.index.Len(), inTree)
	case c.private < 0 || inTree+c.private+len(c.free) != len(c.nodes):
		return fmt.Errorf("tree %d + private %d + free %d != total %d", inTree, c.private, len(c.free), len(c.nodes))
	}
	return nil
}
