package indexer

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvstrand/mocker/kv"
)

// Defaults for the approximate index, after Dynamo's router.
const (
	DefaultTTL     = 120 * time.Second
	DefaultMaxSize = 1 << 20
	// DefaultPruneTargetRatio is the fraction of MaxSize an over-full index
	// shrinks to, so eviction runs in batches rather than on every insert
	// (Dynamo's router_prune_target_ratio).
	DefaultPruneTargetRatio = 0.8
)

type approxKey struct {
	worker uint64
	block  kv.SeqHash
}

type approxEntry struct {
	key     approxKey
	expires time.Time
}

// Approx is an index for workers that publish no KV events: the router
// records the blocks of each request it routes as held by the chosen worker
// for a TTL, on the guess that the worker keeps them cached about that long.
// Re-inserting a block refreshes its TTL. Past MaxSize blocks the oldest are
// evicted down to the prune target ratio (80% by default) of MaxSize. Time is passed in, never read, so tests
// and virtual-time runs control expiry. Not safe for concurrent use.
type Approx struct {
	*Indexer
	ttl     time.Duration
	maxSize int
	prune   float64
	expiry  map[approxKey]time.Time
	// queue is a min-heap by expiry with exactly one entry per key in
	// expiry, so its size follows the live blocks, not the insert rate. A
	// refresh only moves the expiry in the map, leaving the entry early;
	// an early entry, once popped, goes back with the key's current expiry.
	queue   []approxEntry
	blocks  []kv.Block
	removed [1]kv.SeqHash
}

// NewApprox returns an approximate index with the given TTL and size bound;
// zero values take DefaultTTL and DefaultMaxSize.
func NewApprox(ttl time.Duration, maxSize int) (*Approx, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("approximate index: ttl %v must not be negative", ttl)
	}
	if maxSize < 0 {
		return nil, fmt.Errorf("approximate index: max size %d must not be negative", maxSize)
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if maxSize == 0 {
		maxSize = DefaultMaxSize
	}
	return &Approx{
		Indexer: New(),
		ttl:     ttl,
		maxSize: maxSize,
		prune:   DefaultPruneTargetRatio,
		expiry:  make(map[approxKey]time.Time),
	}, nil
}

// SetPruneTargetRatio sets the fraction of the size bound an over-full
// index is pruned down to (Dynamo's router_prune_target_ratio, default
// DefaultPruneTargetRatio). It must be in (0, 1].
func (a *Approx) SetPruneTargetRatio(ratio float64) error {
	if !(ratio > 0 && ratio <= 1) {
		return fmt.Errorf("approximate index: prune target ratio %v must be in (0, 1]", ratio)
	}
	a.prune = ratio
	return nil
}

// Insert records the blocks of one request (local and sequence hashes, same
// length, from the first block) as held by worker until now+TTL.
func (a *Approx) Insert(worker uint64, locals []kv.LocalHash, seqs []kv.SeqHash, now time.Time) {
	n := min(len(locals), len(seqs))
	if n == 0 {
		return
	}
	a.Expire(now)
	a.blocks = a.blocks[:0]
	for i := range n {
		a.blocks = append(a.blocks, kv.Block{Hash: seqs[i], TokensHash: locals[i]})
	}
	// A parentless Stored from the first block cannot fail.
	_ = a.Indexer.Apply(worker, kv.Event{Kind: kv.Stored, Blocks: a.blocks})
	exp := now.Add(a.ttl)
	for i := range n {
		k := approxKey{worker, seqs[i]}
		if _, held := a.expiry[k]; !held {
			a.push(approxEntry{k, exp})
		}
		a.expiry[k] = exp
	}
	if len(a.expiry) > a.maxSize {
		target := int(a.prune * float64(a.maxSize))
		for len(a.expiry) > target && a.pop(time.Time{}, true) {
		}
	}
}

// Expire removes every block whose TTL has passed at now.
func (a *Approx) Expire(now time.Time) {
	for a.pop(now, false) {
	}
}

// pop takes the earliest queue entry if force is set or it has expired at
// now. An entry made early by a refresh goes back with the key's current
// expiry; otherwise the block is evicted. It reports whether an entry was
// taken.
func (a *Approx) pop(now time.Time, force bool) bool {
	if len(a.queue) == 0 {
		return false
	}
	e := a.queue[0]
	if !force && e.expires.After(now) {
		return false
	}
	cur, ok := a.expiry[e.key]
	if ok && !cur.Equal(e.expires) {
		// Refreshed since queued: the heap's root moves to its new place.
		a.queue[0].expires = cur
		a.down(0)
		return true
	}
	last := len(a.queue) - 1
	a.queue[0] = a.queue[last]
	a.queue[last] = approxEntry{}
	a.queue = a.queue[:last]
	a.down(0)
	if ok {
		delete(a.expiry, e.key)
		a.removed[0] = e.key.block
		// The block is known to be held; removal cannot miss.
		_ = a.Indexer.remove(a.Indexer.worker(e.key.worker), a.removed[:])
	}
	return true
}

func (a *Approx) push(e approxEntry) {
	a.queue = append(a.queue, e)
	i := len(a.queue) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a.queue[i].expires.Before(a.queue[p].expires) {
			break
		}
		a.queue[i], a.queue[p] = a.queue[p], a.queue[i]
		i = p
	}
}

func (a *Approx) down(i int) {
	q := a.queue
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q[r].expires.Before(q[l].expires) {
			m = r
		}
		if !q[m].expires.Before(q[i].expires) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

// RemoveWorker drops worker's blocks and their TTLs.
func (a *Approx) RemoveWorker(worker uint64) bool {
	for k := range a.expiry {
		if k.worker == worker {
			delete(a.expiry, k)
		}
	}
	// Its queue entries go too, keeping one entry per live key.
	kept := slices.DeleteFunc(a.queue, func(e approxEntry) bool { return e.key.worker == worker })
	if len(kept) < len(a.queue) {
		a.queue = kept
		for i := len(kept)/2 - 1; i >= 0; i-- {
			a.down(i)
		}
	}
	return a.Indexer.RemoveWorker(worker)
}

// Len returns how many (worker, block) pairs hold a live TTL.
func (a *Approx) Len() int { return len(a.expiry) }
