package indexer

import (
	"fmt"
	"time"

	"github.com/kvstrand/mocker/kv"
)

// Defaults for the approximate index, after Dynamo's router.
const (
	DefaultTTL     = 120 * time.Second
	DefaultMaxSize = 1 << 20
	// pruneTarget is the fraction of MaxSize an over-full index shrinks to,
	// so eviction runs in batches rather than on every insert.
	pruneTarget = 0.8
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
// evicted down to 80% of MaxSize. Time is passed in, never read, so tests
// and virtual-time runs control expiry. Not safe for concurrent use.
type Approx struct {
	*Indexer
	ttl     time.Duration
	maxSize int
	expiry  map[approxKey]time.Time
	// queue holds insertions oldest first. A refresh appends a new entry and
	// leaves the old one stale; stale entries are skipped when popped.
	queue   []approxEntry
	head    int
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
		expiry:  make(map[approxKey]time.Time),
	}, nil
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
		a.expiry[k] = exp
		a.queue = append(a.queue, approxEntry{k, exp})
	}
	if len(a.expiry) > a.maxSize {
		target := int(pruneTarget * float64(a.maxSize))
		for len(a.expiry) > target && a.pop(time.Time{}, true) {
		}
	}
	a.compact()
}

// Expire removes every block whose TTL has passed at now.
func (a *Approx) Expire(now time.Time) {
	for a.pop(now, false) {
	}
	a.compact()
}

// pop removes the oldest queue entry if force is set or it has expired at
// now, evicting its block unless a refresh made the entry stale. It reports
// whether an entry was removed.
func (a *Approx) pop(now time.Time, force bool) bool {
	if a.head >= len(a.queue) {
		return false
	}
	e := a.queue[a.head]
	if !force && e.expires.After(now) {
		return false
	}
	a.head++
	if cur, ok := a.expiry[e.key]; ok && cur.Equal(e.expires) {
		delete(a.expiry, e.key)
		a.removed[0] = e.key.block
		// The block is known to be held; removal cannot miss.
		_ = a.Indexer.remove(a.Indexer.worker(e.key.worker), a.removed[:])
	}
	return true
}

// compact reclaims the popped prefix of the queue once it dominates.
func (a *Approx) compact() {
	if a.head > 1024 && a.head*2 > len(a.queue) {
		n := copy(a.queue, a.queue[a.head:])
		clear(a.queue[n:])
		a.queue = a.queue[:n]
		a.head = 0
	}
}

// RemoveWorker drops worker's blocks and their TTLs.
func (a *Approx) RemoveWorker(worker uint64) bool {
	for k := range a.expiry {
		if k.worker == worker {
			delete(a.expiry, k)
		}
	}
	return a.Indexer.RemoveWorker(worker)
}

// Len returns how many (worker, block) pairs hold a live TTL.
func (a *Approx) Len() int { return len(a.expiry) }
