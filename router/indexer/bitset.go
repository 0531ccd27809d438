package indexer

import "math/bits"

// bitset is a set of worker slots. The first 64 slots live inline so a
// cluster of up to 64 workers never allocates per node.
type bitset struct {
	lo   uint64
	rest []uint64
}

func (b *bitset) set(i int) {
	if i < 64 {
		b.lo |= 1 << uint(i)
		return
	}
	w := i/64 - 1
	for len(b.rest) <= w {
		b.rest = append(b.rest, 0)
	}
	b.rest[w] |= 1 << uint(i%64)
}

func (b *bitset) has(i int) bool {
	if i < 64 {
		return b.lo&(1<<uint(i)) != 0
	}
	w := i/64 - 1
	return w < len(b.rest) && b.rest[w]&(1<<uint(i%64)) != 0
}

func (b *bitset) clear(i int) {
	if i < 64 {
		b.lo &^= 1 << uint(i)
		return
	}
	if w := i/64 - 1; w < len(b.rest) {
		b.rest[w] &^= 1 << uint(i%64)
	}
}

func (b *bitset) empty() bool {
	if b.lo != 0 {
		return false
	}
	for _, w := range b.rest {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b *bitset) count() int {
	n := bits.OnesCount64(b.lo)
	for _, w := range b.rest {
		n += bits.OnesCount64(w)
	}
	return n
}

// copyFrom makes b equal to o, reusing b's overflow storage.
func (b *bitset) copyFrom(o *bitset) {
	b.lo = o.lo
	b.rest = append(b.rest[:0], o.rest...)
}
