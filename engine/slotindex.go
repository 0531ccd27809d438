package engine

import "github.com/kvstrand/mocker/kv"

// slotIndex is the block pool's prefix index: sequence hash to the slot of
// the block indexed under it, the first block of each run (see blockPool).
// It is kv.Index's open addressing with backward-shift deletion, but an
// entry keeps only the low 32 bits of its hash beside the slot: the full
// hash is the block's own, read from the pool when the low bits match.
// Entries are 8 bytes, eight to a cache line, and the block read to
// confirm a match is one its caller reads anyway.
//
// The table is kept at most a quarter full, so that the home entry is
// nearly always the last one read: a probe lands at random. (Most would-be
// probes never come: see blockPool's fork counters.) It starts with room
// for a run per 16 blocks and grows by doubling; a prefill pool's runs are
// a prompt's new blocks, dozens each, and its table stays a few
// kilobytes.
//
// The low bits are also the hash's home position, so tables are limited
// to 2^32 entries: pools of up to 2^30 blocks, 32 GiB of them, past any
// num_gpu_blocks a process holds.
type slotIndex struct {
	entries []slotEntry
	mask    uint64
	n       int
}

// slotEntry is one indexed block. slot1 is its slot plus one, so the zero
// entry is empty whatever the hash.
type slotEntry struct {
	low   uint32
	slot1 int32
}

func newSlotIndex(n int) slotIndex {
	var x slotIndex
	x.resize(n)
	return x
}

// resize makes room for n hashes at a load of at most one quarter.
func (x *slotIndex) resize(n int) {
	size := 16
	for size < 4*n {
		size <<= 1
	}
	old := x.entries
	x.entries, x.mask = make([]slotEntry, size), uint64(size-1)
	for _, e := range old {
		if e.slot1 != 0 {
			i := uint64(e.low) & x.mask
			for x.entries[i].slot1 != 0 {
				i = (i + 1) & x.mask
			}
			x.entries[i] = e
		}
	}
}

// find is the position of the entry for h, or of the empty entry where h
// belongs. blocks are the pool's, whose hash confirms a match.
func (x *slotIndex) find(h kv.SeqHash, blocks []pblock) uint64 {
	low := uint32(h)
	i := uint64(h) & x.mask
	for {
		e := x.entries[i]
		if e.slot1 == 0 || e.low == low && blocks[e.slot1-1].hash == h {
			return i
		}
		i = (i + 1) & x.mask
	}
}

// get returns the slot indexed under h.
func (x *slotIndex) get(h kv.SeqHash, blocks []pblock) (int32, bool) {
	e := x.entries[x.find(h, blocks)]
	return e.slot1 - 1, e.slot1 != 0
}

// add indexes slot under h unless h is indexed already; it reports whether
// it did. blocks[slot].hash must be h.
func (x *slotIndex) add(h kv.SeqHash, slot int32, blocks []pblock) bool {
	if 4*(x.n+1) > len(x.entries) {
		x.resize(x.n + 1)
	}
	e := &x.entries[x.find(h, blocks)]
	if e.slot1 != 0 {
		return false
	}
	*e = slotEntry{low: uint32(h), slot1: slot + 1}
	x.n++
	return true
}

// removeSlot drops h, the hash slot is indexed under, and reports whether
// it was. A slot is indexed under one hash at most, so its entry is found
// by the slot alone, without reading the block to confirm the hash.
func (x *slotIndex) removeSlot(h kv.SeqHash, slot int32) bool {
	i := uint64(h) & x.mask
	for {
		switch x.entries[i].slot1 {
		case slot + 1:
			x.removeAt(i)
			return true
		case 0:
			return false
		}
		i = (i + 1) & x.mask
	}
}

// removeAt empties entry i, which is in use.
func (x *slotIndex) removeAt(i uint64) {
	// Every entry up to the next empty one whose probe passes through the
	// gap at i moves into it, which opens a gap where it was.
	entries, mask := x.entries, x.mask
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := entries[j]
		if e.slot1 == 0 {
			break
		}
		// The entry at j moves if its home does not lie cyclically in
		// (i, j]: if i is no farther from j, going backwards, than its
		// home. Whether it moves is as good as random, so the move is
		// made without a branch: an entry that stays is written back in
		// place.
		move := (j-uint64(e.low))&mask >= (j-i)&mask
		to := j
		if move {
			to = i
		}
		entries[to] = e
		if move {
			i = j
		}
	}
	entries[i] = slotEntry{}
	x.n--
}

// each calls f with every indexed slot, in no set order.
func (x *slotIndex) each(f func(slot int32) bool) {
	for _, e := range x.entries {
		if e.slot1 != 0 && !f(e.slot1-1) {
			return
		}
	}
}
