package engine

import (
	"iter"

	"github.com/kvstrand/mocker/kv"
)

// blockIndex maps sequence hashes to block slots: a pool's prefix index.
// A pool indexes at most one block per slot, so the table never grows: it
// is sized at twice the pool and uses open addressing with linear probing.
// Deletion shifts the entries that follow back into the gap instead of
// leaving a marker, so the constant store-and-evict churn of a full pool
// keeps probes short (a Go map's deleted-slot markers pile up under it,
// and lookups in the pool were the hottest map work of a cluster run).
type blockIndex struct {
	entries []indexEntry
	mask    uint64
	n       int
}

type indexEntry struct {
	hash kv.SeqHash
	slot int32 // the block's slot + 1; 0 marks an empty entry
}

func newBlockIndex(blocks int) blockIndex {
	size := 2
	for size < 2*blocks {
		size <<= 1
	}
	return blockIndex{entries: make([]indexEntry, size), mask: uint64(size - 1)}
}

// home is where h's probe starts. Sequence hashes are XXH3 outputs, so
// their low bits are already uniform.
func (x *blockIndex) home(h kv.SeqHash) uint64 { return uint64(h) & x.mask }

// get returns the slot indexed under h.
func (x *blockIndex) get(h kv.SeqHash) (int32, bool) {
	for i := x.home(h); ; i = (i + 1) & x.mask {
		e := &x.entries[i]
		if e.slot == 0 {
			return noSlot, false
		}
		if e.hash == h {
			return e.slot - 1, true
		}
	}
}

// put indexes slot s under h, which must not be indexed yet.
func (x *blockIndex) put(h kv.SeqHash, s int32) {
	i := x.home(h)
	for x.entries[i].slot != 0 {
		i = (i + 1) & x.mask
	}
	x.entries[i] = indexEntry{hash: h, slot: s + 1}
	x.n++
}

// del removes h, if indexed.
func (x *blockIndex) del(h kv.SeqHash) {
	i := x.home(h)
	for {
		e := &x.entries[i]
		if e.slot == 0 {
			return
		}
		if e.hash == h {
			break
		}
		i = (i + 1) & x.mask
	}
	// Every entry up to the next empty one whose probe passes through the
	// gap at i moves into it, which opens a gap where it was.
	for j := (i + 1) & x.mask; x.entries[j].slot != 0; j = (j + 1) & x.mask {
		k := x.home(x.entries[j].hash)
		// The entry at j stays if its home lies cyclically in (i, j].
		if (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		x.entries[i] = x.entries[j]
		i = j
	}
	x.entries[i] = indexEntry{}
	x.n--
}

// len is the number of indexed hashes.
func (x *blockIndex) len() int { return x.n }

// all yields every indexed hash and its slot, in no set order.
func (x *blockIndex) all() iter.Seq2[kv.SeqHash, int32] {
	return func(yield func(kv.SeqHash, int32) bool) {
		for _, e := range x.entries {
			if e.slot != 0 && !yield(e.hash, e.slot-1) {
				return
			}
		}
	}
}
