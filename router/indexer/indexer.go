package indexer

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/kvstrand/mocker/kv"
)

// Errors Apply returns. Both are reported per event and are not fatal: the
// index stays consistent and later events still apply.
var (
	// ErrUnknownParent means a Stored event named a parent block the index
	// does not hold for that worker (it was evicted, or an earlier event was
	// lost), so the whole event was dropped.
	ErrUnknownParent = errors.New("stored event's parent block is unknown")
	// ErrBlockNotFound means a Removed event named blocks the index does not
	// hold for that worker; the blocks it did hold were still removed.
	ErrBlockNotFound = errors.New("removed event names unknown blocks")
	// ErrSelfParent means a Stored event named a block as its own parent:
	// its parent hash, or the block before it in the event, has the
	// block's own hash. Dynamo's tree rejects such an event, since it
	// would make a block its own ancestor.
	ErrSelfParent = errors.New("stored event names a block as its own parent")
)

// kidsInline is how many children a node keeps inline and in a list
// before switching to a map. Most nodes in a prompt tree have one child; a
// scan of a few entries beats a map lookup and costs far less memory.
const kidsInline = 8

type node struct {
	parent  *node
	hash    kv.LocalHash
	workers bitset
	// kid0 is the first child, inline: most nodes of a prompt tree have
	// one. more holds the others.
	kid0 kid
	more *kids
	// A node fills one cache line of its slab (see slabSize): a prune
	// walking up a chain of them reads one line each.
	_ [8]byte
}

// kid is a child and its hash, kept side by side so that a scan of a
// node's children reads only the node's own storage: the children
// themselves, each elsewhere in memory, are not touched until found.
type kid struct {
	hash kv.LocalHash
	n    *node
}

// kids are a node's children past kid0: in a short list, then, past
// kidsInline children in all, in a map.
type kids struct {
	list []kid
	m    map[kv.LocalHash]*node
}

// slabSize is how many nodes are allocated at once (a slab of 64-byte
// nodes is a whole number of pages, so every node starts a cache line);
// maxSpare bounds the pruned nodes kept for reuse, so a shrinking tree
// returns memory.
const (
	slabSize = 128
	maxSpare = 1 << 14
)

func (n *node) child(h kv.LocalHash) *node {
	if n.kid0.n != nil && n.kid0.hash == h {
		return n.kid0.n
	}
	if k := n.more; k != nil {
		if k.m != nil {
			return k.m[h]
		}
		for _, c := range k.list {
			if c.hash == h {
				return c.n
			}
		}
	}
	return nil
}

func (n *node) addChild(c *node) {
	if n.kid0.n == nil {
		n.kid0 = kid{c.hash, c}
		return
	}
	k := n.more
	if k == nil {
		k = &kids{}
		n.more = k
	}
	if k.m != nil {
		k.m[c.hash] = c
		return
	}
	if len(k.list) < kidsInline-1 {
		k.list = append(k.list, kid{c.hash, c})
		return
	}
	k.m = make(map[kv.LocalHash]*node, 2*kidsInline)
	for _, e := range k.list {
		k.m[e.hash] = e.n
	}
	k.list = nil
	k.m[c.hash] = c
}

func (n *node) removeChild(h kv.LocalHash) {
	k := n.more
	if n.kid0.n != nil && n.kid0.hash == h {
		n.kid0 = kid{}
		// Keep a child inline while the list has one.
		if k != nil && len(k.list) > 0 {
			last := len(k.list) - 1
			n.kid0 = k.list[last]
			k.list[last] = kid{}
			k.list = k.list[:last]
		}
		return
	}
	if k == nil {
		return
	}
	if k.m != nil {
		delete(k.m, h)
		return
	}
	for i, c := range k.list {
		if c.hash == h {
			last := len(k.list) - 1
			k.list[i] = k.list[last]
			k.list[last] = kid{}
			k.list = k.list[:last]
			return
		}
	}
}

func (n *node) childless() bool {
	return n.kid0.n == nil && (n.more == nil || len(n.more.list) == 0 && len(n.more.m) == 0)
}

type workerState struct {
	id   uint64
	slot int
	// blocks maps the worker's own block keys (sequence hashes) to the tree
	// node holding that block, so Removed events need no tree walk.
	blocks kv.Index[*node]
	// extra counts, per node, the worker's keys on it beyond the first. An
	// engine may name one position (same tokens, same parent) with two
	// block hashes; the worker's bit on the node must stay until its last
	// key goes, or the node is pruned and recycled while a key still
	// points at it. Nil until the first such node: it is rare.
	extra map[*node]int32
	// Event-id gap detection per dp rank: rank 0 inline, other ranks in a
	// map bounded by maxTrackedRanks, so a hostile or corrupt rank costs
	// one entry, never an array up to it.
	last0 uint64
	seen0 bool
	ranks map[uint32]uint64
	// tiers holds, per medium below the GPU pool (tiers[m-1] for medium
	// m), the blocks the worker's events say that tier holds, by
	// sequence hash; nil until the tier's first Stored event, so a worker
	// with no tier costs nothing here.
	tiers [kv.NumMedia - 1]*kv.Index[struct{}]
}

// maxTrackedRanks bounds the dp ranks tracked for gap detection per
// worker; events of further ranks still apply, unchecked for gaps.
const maxTrackedRanks = 1024

// Score is one worker's result from FindMatches.
type Score struct {
	Worker uint64
	// Depth is how many leading blocks of the query the worker holds.
	Depth int
	// TreeSize is how many blocks the index holds for the worker.
	TreeSize int
}

// Stats counts what the index has applied and what it had to drop.
type Stats struct {
	Events         uint64 // events applied (fully or partly)
	UnknownParent  uint64 // Stored events dropped for an unknown parent
	MissingBlocks  uint64 // block hashes in Removed events that were not held
	EventGaps      uint64 // events whose id skipped ahead of the last one seen
	UntrackedRanks uint64 // events of a dp rank past the per-worker tracking bound, not checked for gaps
	Nodes          int    // tree nodes, root excluded
	Workers        int    // workers with state in the index
	IndexedBlocks  int    // (worker, block) pairs held
	DroppedEvents  uint64 // events dropped entirely
	UnknownEvents  uint64 // events of an unknown kind
	RemovedWorkers uint64 // RemoveWorker calls that found the worker
	TierEvents     uint64 // events of a tier below the GPU pool applied
	TierBlocks     int    // (worker, medium, block) triples held on tiers below the GPU pool
}

// Indexer is a radix tree of the blocks each worker holds, keyed by local
// block hash, fed by the workers' KV events. It is not safe for concurrent
// use: the owner serialises calls.
type Indexer struct {
	root    node
	workers map[uint64]*workerState
	slots   []*workerState // by slot; nil entries are free
	free    []int
	stats   Stats
	active  bitset // FindMatches scratch
	// spare holds pruned nodes for reuse; slab is the unused rest of the
	// last batch allocated. Both cut allocations on the event path.
	spare []*node
	slab  []node
	// removing is remove's scratch: the nodes of an event's keys.
	removing []*node
	// touched keeps the reads of remove's touches from being optimised
	// away.
	touched uint64
	// last is the worker of the last Apply: a worker's events come in
	// runs (an engine pass's), which then look their worker up once.
	last *workerState
}

func (x *Indexer) newNode(parent *node, h kv.LocalHash) *node {
	var n *node
	if k := len(x.spare); k > 0 {
		n = x.spare[k-1]
		x.spare = x.spare[:k-1]
	} else {
		if len(x.slab) == 0 {
			x.slab = make([]node, slabSize)
		}
		n = &x.slab[0]
		x.slab = x.slab[1:]
	}
	n.parent, n.hash = parent, h
	return n
}

// New returns an empty index.
func New() *Indexer {
	return &Indexer{workers: make(map[uint64]*workerState)}
}

func (x *Indexer) worker(id uint64) *workerState {
	if ws := x.last; ws != nil && ws.id == id {
		return ws
	}
	if ws := x.workers[id]; ws != nil {
		x.last = ws
		return ws
	}
	// A worker's keys churn with its pool, its table's size held just
	// under a growth point: a sparse table keeps its probes and deletions'
	// shift runs short there.
	ws := &workerState{id: id, blocks: kv.NewSparseIndex[*node](0)}
	if n := len(x.free); n > 0 {
		ws.slot = x.free[n-1]
		x.free = x.free[:n-1]
		x.slots[ws.slot] = ws
	} else {
		ws.slot = len(x.slots)
		x.slots = append(x.slots, ws)
	}
	x.workers[id] = ws
	x.last = ws
	return ws
}

// Apply applies one event from worker id. A worker the index has not seen
// is added. An event of a tier below the GPU pool (kv.MediumCPU and
// below) goes to that tier's blocks (see TierRun), not to the tree. The
// returned error (ErrUnknownParent or ErrBlockNotFound, with context)
// reports a partial or dropped event; the index is consistent either way.
func (x *Indexer) Apply(id uint64, ev kv.Event) error {
	if ev.Medium != kv.MediumGPU {
		return x.applyTier(id, ev)
	}
	ws := x.worker(id)
	x.checkGap(ws, ev)
	switch ev.Kind {
	case kv.Stored:
		return x.store(ws, ev)
	case kv.Removed:
		return x.remove(ws, ev.RemovedHashes)
	case kv.Cleared:
		x.clearWorker(ws)
		x.stats.Events++
		return nil
	default:
		x.stats.UnknownEvents++
		return fmt.Errorf("worker %d event %d: unknown kind %d", id, ev.ID, ev.Kind)
	}
}

func (x *Indexer) checkGap(ws *workerState, ev kv.Event) {
	if ev.DPRank == 0 {
		if ws.seen0 && ev.ID > ws.last0+1 {
			x.stats.EventGaps++
		}
		ws.last0, ws.seen0 = ev.ID, true
		return
	}
	last, seen := ws.ranks[ev.DPRank]
	if !seen {
		if len(ws.ranks) >= maxTrackedRanks {
			x.stats.UntrackedRanks++
			return
		}
		if ws.ranks == nil {
			ws.ranks = make(map[uint32]uint64)
		}
	} else if ev.ID > last+1 {
		x.stats.EventGaps++
	}
	ws.ranks[ev.DPRank] = ev.ID
}

func (x *Indexer) store(ws *workerState, ev kv.Event) error {
	parent, hasParent := ev.Parent, ev.HasParent
	for _, b := range ev.Blocks {
		if hasParent && b.Hash == parent {
			x.stats.DroppedEvents++
			return fmt.Errorf("worker %d event %d: block %#x: %w", ws.id, ev.ID, uint64(b.Hash), ErrSelfParent)
		}
		parent, hasParent = b.Hash, true
	}
	cur := &x.root
	if ev.HasParent {
		p, _ := ws.blocks.Get(ev.Parent)
		if p == nil {
			x.stats.UnknownParent++
			x.stats.DroppedEvents++
			return fmt.Errorf("worker %d event %d: parent %#x: %w", ws.id, ev.ID, uint64(ev.Parent), ErrUnknownParent)
		}
		cur = p
	}
	for _, b := range ev.Blocks {
		c := cur.child(b.TokensHash)
		if c == nil {
			c = x.newNode(cur, b.TokensHash)
			cur.addChild(c)
			x.stats.Nodes++
		}
		key, _ := ws.blocks.Ref(b.Hash)
		if old := *key; old != c {
			if c.workers.has(ws.slot) {
				// Another key of this worker already names c.
				if ws.extra == nil {
					ws.extra = make(map[*node]int32)
				}
				ws.extra[c]++
			} else {
				c.workers.set(ws.slot)
			}
			*key = c
			if old != nil {
				// The worker reused a block key at another position; the
				// old position loses that key.
				x.release(ws, old)
			} else {
				x.stats.IndexedBlocks++
			}
		}
		cur = c
	}
	x.stats.Events++
	return nil
}

func (x *Indexer) remove(ws *workerState, hashes []kv.SeqHash) error {
	// The worker's keys go first, then its nodes, in the event's order:
	// the same result as key by key (a node keeps the worker's bit until
	// its key is released, so none is pruned before its turn), but the
	// lookups of the keys and the reads of their nodes no longer wait on
	// each other. A pool evicts a chain leaf first, so each node's parent
	// is usually the next node, and the reads in touch bring in the
	// parents that prune then writes. Each read would otherwise be a
	// cache miss on its own, one after another.
	missing := 0
	nodes := x.removing[:0]
	x.touched = ws.blocks.Touch(hashes)
	for _, h := range hashes {
		n, _ := ws.blocks.Delete(h)
		if n == nil {
			missing++
			continue
		}
		nodes = append(nodes, n)
	}
	x.touched += x.touch(nodes)
	for _, n := range nodes {
		x.stats.IndexedBlocks--
		x.release(ws, n)
	}
	clear(nodes)
	x.removing = nodes[:0]
	x.stats.Events++
	if missing > 0 {
		x.stats.MissingBlocks += uint64(missing)
		return fmt.Errorf("worker %d: %d of %d blocks: %w", ws.id, missing, len(hashes), ErrBlockNotFound)
	}
	return nil
}

// touch reads a word of each of nodes, independent reads the processor
// overlaps, so that the walk that follows finds them in its cache; the
// sum only keeps the reads from being optimised away.
func (x *Indexer) touch(nodes []*node) uint64 {
	var sum uint64
	for _, n := range nodes {
		sum += n.workers.lo
	}
	return sum
}

// release drops one of ws's keys on n: the worker leaves n, and n may be
// pruned, only with its last key there.
func (x *Indexer) release(ws *workerState, n *node) {
	if ws.extra != nil {
		if k, ok := ws.extra[n]; ok {
			if k <= 1 {
				delete(ws.extra, n)
			} else {
				ws.extra[n] = k - 1
			}
			return
		}
	}
	n.workers.clear(ws.slot)
	x.prune(n)
}

// prune detaches n and then its ancestors while they hold no worker and no
// child. A node with no worker but with children stays, so descendants that
// other events still refer to keep their place in the tree.
func (x *Indexer) prune(n *node) {
	for n != &x.root && n.workers.empty() && n.childless() {
		p := n.parent
		p.removeChild(n.hash)
		if len(x.spare) < maxSpare {
			hi := n.workers.hi
			*n = node{}
			if hi != nil {
				*hi = (*hi)[:0]
				n.workers.hi = hi
			}
			x.spare = append(x.spare, n)
		}
		x.stats.Nodes--
		n = p
	}
}

func (x *Indexer) clearWorker(ws *workerState) {
	for _, n := range ws.blocks.All() {
		x.release(ws, n)
		x.stats.IndexedBlocks--
	}
	ws.blocks.Clear()
}

// applyTier applies an event of the tier below the GPU pool that
// ev.Medium names. A tier's blocks are kept as a set of sequence hashes,
// not in the tree: a sequence hash names a block's whole prefix, so
// whether a tier holds the block a prompt's walk reaches next is one
// lookup, and a tier's blocks need no parent the index knows (a host tier
// takes in the tails of chains whose heads stay on the GPU). Its events
// are not checked for gaps: each medium numbers its events apart.
func (x *Indexer) applyTier(id uint64, ev kv.Event) error {
	m := int(ev.Medium) - 1
	if m < 0 || m >= kv.NumMedia-1 {
		x.stats.UnknownEvents++
		return fmt.Errorf("worker %d event %d: unknown medium %d", id, ev.ID, ev.Medium)
	}
	switch ev.Kind {
	case kv.Stored:
		ws := x.worker(id)
		t := ws.tiers[m]
		if t == nil {
			t = new(kv.Index[struct{}])
			*t = kv.NewSparseIndex[struct{}](0)
			ws.tiers[m] = t
		}
		for _, b := range ev.Blocks {
			if _, added := t.Ref(b.Hash); added {
				x.stats.TierBlocks++
			}
		}
	case kv.Removed:
		ws := x.workers[id]
		var t *kv.Index[struct{}]
		if ws != nil {
			t = ws.tiers[m]
		}
		missing := 0
		for _, h := range ev.RemovedHashes {
			if t == nil {
				missing++
				continue
			}
			if _, ok := t.Delete(h); ok {
				x.stats.TierBlocks--
			} else {
				missing++
			}
		}
		x.stats.TierEvents++
		if missing > 0 {
			x.stats.MissingBlocks += uint64(missing)
			return fmt.Errorf("worker %d %s tier: %d of %d blocks: %w", id, ev.Medium, missing, len(ev.RemovedHashes), ErrBlockNotFound)
		}
		return nil
	case kv.Cleared:
		if ws := x.workers[id]; ws != nil {
			x.clearTier(ws, m)
		}
	default:
		x.stats.UnknownEvents++
		return fmt.Errorf("worker %d event %d: unknown kind %d", id, ev.ID, ev.Kind)
	}
	x.stats.TierEvents++
	return nil
}

func (x *Indexer) clearTier(ws *workerState, m int) {
	if t := ws.tiers[m]; t != nil {
		x.stats.TierBlocks -= t.Len()
		ws.tiers[m] = nil
	}
}

// TierSize returns how many blocks the index holds for worker id on the
// tier of medium m (kv.MediumCPU or below).
func (x *Indexer) TierSize(id uint64, m kv.Medium) int {
	ws := x.workers[id]
	if ws == nil || m == kv.MediumGPU || int(m) > len(ws.tiers) {
		return 0
	}
	if t := ws.tiers[m-1]; t != nil {
		return t.Len()
	}
	return 0
}

// HasTiers reports whether the index holds any block on a tier below the
// GPU pool, for any worker: when it does not, TierRun is 0 for everyone
// and a router need not ask.
func (x *Indexer) HasTiers() bool { return x.stats.TierBlocks > 0 }

// TierRun is how worker id's tiers below the GPU pool continue a prompt
// whose first from blocks it holds on the GPU: seqs are the prompt's
// blocks by sequence hash. The walk takes one run from each tier in turn,
// as Dynamo's kv router does: run[0] blocks on the host tier (CPU) from
// block from on, then run[1] on disk (DISK) from where that stopped,
// then run[2] on object storage (EXTERNAL). A tier holding nothing at the
// walk's position adds nothing and leaves it where it was.
func (x *Indexer) TierRun(id uint64, seqs []kv.SeqHash, from int) (run [kv.NumMedia - 1]int) {
	ws := x.workers[id]
	if ws == nil {
		return run
	}
	pos := from
	for m, t := range ws.tiers {
		if t == nil || t.Len() == 0 {
			continue
		}
		start := pos
		for pos < len(seqs) {
			if t.Lookup(seqs[pos]) == nil {
				break
			}
			pos++
		}
		run[m] = pos - start
	}
	return run
}

// RemoveWorker drops every block of worker id and forgets the worker. It
// reports whether the worker was known.
func (x *Indexer) RemoveWorker(id uint64) bool {
	ws := x.workers[id]
	if ws == nil {
		return false
	}
	x.clearWorker(ws)
	for m := range ws.tiers {
		x.clearTier(ws, m)
	}
	delete(x.workers, id)
	if x.last == ws {
		x.last = nil
	}
	x.slots[ws.slot] = nil
	x.free = append(x.free, ws.slot)
	x.stats.RemovedWorkers++
	return true
}

// TreeSize returns how many blocks the index holds for worker id.
func (x *Indexer) TreeSize(id uint64) int {
	if ws := x.workers[id]; ws != nil {
		return ws.blocks.Len()
	}
	return 0
}

// Stats returns the counters.
func (x *Indexer) Stats() Stats {
	s := x.stats
	s.Workers = len(x.workers)
	return s
}

// FindMatches walks the tree along locals (a request's local block hashes,
// in order) and appends to dst one Score per worker holding at least the
// first block: how many leading blocks it holds, and its tree size. Scores
// come by increasing depth, then by worker slot: stable for a given
// sequence of events, so results repeat run to run.
//
// With earlyExit the walk stops as soon as a single worker remains, so that
// worker's Depth is a lower bound; use it when only the set of matching
// workers matters. A router comparing depths passes false.
func (x *Indexer) FindMatches(locals []kv.LocalHash, earlyExit bool, dst []Score) []Score {
	cur := &x.root
	act := &x.active
	depth := 0
	for i, h := range locals {
		c := cur.child(h)
		if c == nil {
			break
		}
		if i == 0 {
			act.copyFrom(&c.workers)
		} else {
			dst = x.dropOut(act, &c.workers, depth, dst)
		}
		if act.empty() {
			return dst
		}
		depth = i + 1
		cur = c
		if earlyExit && act.count() == 1 {
			break
		}
	}
	if depth == 0 {
		return dst
	}
	dst = x.emit(act.lo, 0, depth, dst)
	for i, w := range act.rest() {
		dst = x.emit(w, 64*(i+1), depth, dst)
	}
	return dst
}

// dropOut emits at depth the workers of act missing from next, then narrows
// act to next. Workers only ever leave the active set: one that holds a
// block but not its predecessor has no usable prefix.
func (x *Indexer) dropOut(act, next *bitset, depth int, dst []Score) []Score {
	if d := act.lo &^ next.lo; d != 0 {
		dst = x.emit(d, 0, depth, dst)
	}
	act.lo &= next.lo
	rest, nextRest := act.rest(), next.rest()
	for i := range rest {
		var nw uint64
		if i < len(nextRest) {
			nw = nextRest[i]
		}
		if d := rest[i] &^ nw; d != 0 {
			dst = x.emit(d, 64*(i+1), depth, dst)
		}
		rest[i] &= nw
	}
	return dst
}

func (x *Indexer) emit(w uint64, base, depth int, dst []Score) []Score {
	for w != 0 {
		slot := base + bits.TrailingZeros64(w)
		w &= w - 1
		if ws := x.slots[slot]; ws != nil {
			dst = append(dst, Score{Worker: ws.id, Depth: depth, TreeSize: ws.blocks.Len()})
		}
	}
	return dst
}
