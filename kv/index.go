package kv

import "iter"

// Index maps sequence hashes to values: a worker pool's prefix index, a
// router's record of each worker's blocks. It is a hash table with open
// addressing and linear probing whose deletions shift the entries that
// follow back into the gap instead of leaving a marker, so the constant
// store-and-evict churn of a full pool keeps its probes short (a Go map's
// deleted-slot markers pile up under it, and these lookups were the
// hottest map work of a cluster run). Sequence hashes are XXH3 outputs,
// so their low bits index the table as they are. The zero value is an
// empty index; it is not safe for concurrent use.
//
// An entry is a hash and its value, no more: the hash 0 marks an empty
// entry, and the one value it may have is kept aside, so an index of
// pointers has 16-byte entries, four to a cache line.
type Index[V any] struct {
	entries []indexEntry[V]
	mask    uint64
	n       int
	zero    V // the value of hash 0, when hasZero
	hasZero bool
	sparse  bool // load at most one quarter, not one half
}

type indexEntry[V any] struct {
	hash SeqHash // 0: empty
	val  V
}

// NewIndex returns an index with room for n hashes before it grows.
func NewIndex[V any](n int) Index[V] {
	var x Index[V]
	x.resize(n)
	return x
}

// NewSparseIndex returns an index with room for n hashes before it grows
// that keeps its load at most one quarter, where NewIndex's and the zero
// value's keep it at most one half. It takes twice the memory for shorter
// probes and shift runs, and so fewer mispredicted branches: for a table
// whose size hovers just under a growth point while it churns, as a full
// pool's blocks do, the half-full table's runs are at their longest.
func NewSparseIndex[V any](n int) Index[V] {
	x := Index[V]{sparse: true}
	x.resize(n)
	return x
}

// room is the table size that n hashes need.
func (x *Index[V]) room(n int) int {
	if x.sparse {
		return 4 * n
	}
	return 2 * n
}

// resize makes room for n hashes at a load of at most one half, or one
// quarter if sparse.
func (x *Index[V]) resize(n int) {
	size := 16
	for size < x.room(n) {
		size <<= 1
	}
	old := x.entries
	x.entries, x.mask = make([]indexEntry[V], size), uint64(size-1)
	for i := range old {
		if e := &old[i]; e.hash != 0 {
			*x.slotFor(e.hash) = *e
		}
	}
}

// find is the position of the entry holding h, or of the empty entry
// where h belongs. h must not be 0.
func (x *Index[V]) find(h SeqHash) uint64 {
	i := uint64(h) & x.mask
	for x.entries[i].hash != 0 && x.entries[i].hash != h {
		i = (i + 1) & x.mask
	}
	return i
}

func (x *Index[V]) slotFor(h SeqHash) *indexEntry[V] { return &x.entries[x.find(h)] }

// Len is the number of hashes held.
func (x *Index[V]) Len() int { return x.n }

// Get returns the value held for h.
func (x *Index[V]) Get(h SeqHash) (V, bool) {
	if h == 0 {
		return x.zero, x.hasZero
	}
	if len(x.entries) > 0 {
		if e := x.slotFor(h); e.hash != 0 {
			return e.val, true
		}
	}
	var zero V
	return zero, false
}

// Lookup returns a pointer to the value held for h, or nil if h is absent,
// in one probe: a caller that updates a value in place, or deletes it,
// need not look it up again. The pointer is valid until the next addition
// or deletion.
func (x *Index[V]) Lookup(h SeqHash) *V {
	if h == 0 {
		if x.hasZero {
			return &x.zero
		}
		return nil
	}
	if len(x.entries) > 0 {
		if e := x.slotFor(h); e.hash != 0 {
			return &e.val
		}
	}
	return nil
}

// Ref returns the value held for h, adding h with a zero value if absent
// (added reports it), in one probe. The pointer is valid until the next
// addition.
func (x *Index[V]) Ref(h SeqHash) (v *V, added bool) {
	if h == 0 {
		if !x.hasZero {
			x.hasZero = true
			x.n++
			added = true
		}
		return &x.zero, added
	}
	if x.room(x.n+1) > len(x.entries) {
		x.resize(x.n + 1)
	}
	e := x.slotFor(h)
	if e.hash == 0 {
		e.hash = h
		x.n++
		added = true
	}
	return &e.val, added
}

// Put holds v for h.
func (x *Index[V]) Put(h SeqHash, v V) {
	p, _ := x.Ref(h)
	*p = v
}

// Delete removes h and returns the value it held.
func (x *Index[V]) Delete(h SeqHash) (V, bool) {
	var zero V
	if h == 0 {
		v, ok := x.zero, x.hasZero
		if ok {
			x.zero, x.hasZero = zero, false
			x.n--
		}
		return v, ok
	}
	if len(x.entries) == 0 {
		return zero, false
	}
	i := x.find(h)
	if x.entries[i].hash == 0 {
		return zero, false
	}
	v := x.entries[i].val
	// Every entry up to the next empty one whose probe passes through the
	// gap at i moves into it, which opens a gap where it was.
	for j := (i + 1) & x.mask; x.entries[j].hash != 0; j = (j + 1) & x.mask {
		k := uint64(x.entries[j].hash) & x.mask
		// The entry at j stays if its home lies cyclically in (i, j].
		if (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		x.entries[i] = x.entries[j]
		i = j
	}
	x.entries[i] = indexEntry[V]{}
	x.n--
	return v, true
}

// Touch reads the home entry of each of hs and returns a value that
// depends on them. The reads do not wait on each other, so a caller about
// to look up or delete many hashes of a large index can overlap the cache
// misses of the home entries, which the lookups one by one would take in
// turn; the result only keeps the reads from being optimised away.
func (x *Index[V]) Touch(hs []SeqHash) uint64 {
	if len(x.entries) == 0 {
		return 0
	}
	var sum uint64
	for _, h := range hs {
		sum += uint64(x.entries[uint64(h)&x.mask].hash)
	}
	return sum
}

// Clear removes every hash, keeping the table's storage.
func (x *Index[V]) Clear() {
	clear(x.entries)
	var zero V
	x.zero, x.hasZero = zero, false
	x.n = 0
}

// All yields every hash held and its value, in no set order. The index
// must not change during the iteration.
func (x *Index[V]) All() iter.Seq2[SeqHash, V] {
	return func(yield func(SeqHash, V) bool) {
		if x.hasZero && !yield(0, x.zero) {
			return
		}
		for i := range x.entries {
			if e := &x.entries[i]; e.hash != 0 && !yield(e.hash, e.val) {
				return
			}
		}
	}
}
