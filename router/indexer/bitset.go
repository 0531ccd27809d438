package indexer

import "math/bits"

// bitset is a set of worker slots. The first 64 slots live inline so a
// cluster of up to 64 workers never allocates per node; the others live
// behind a pointer, nil until one is set, so that a bitset costs a tree
// node two words.
type bitset struct {
	lo uint64
	hi *[]uint64
}

// rest is the words of slots 64 and up; writes to it change b.
func (b *bitset) rest() []uint64 {
	if b.hi == nil {
		return nil
	}
	return *b.hi
}

func (b *bitset) set(i int) {
	if i < 64 {
		b.lo |= 1 << uint(i)
		return
	}
	if b.hi == nil {
		b.hi = new([]uint64)
	}
	w := i/64 - 1
	for len(*b.hi) <= w {
		*b.hi = append(*b.hi, 0)
	}
	(*b.hi)[w] |= 1 << uint(i%64)
}

func (b *bitset) has(i int) bool {
	if i < 64 {
		return b.lo&(1<<uint(i)) != 0
	}
	rest, w := b.rest(), i/64-1
	return w < len(rest) && rest[w]&(1<<uint(i%64)) != 0
}

func (b *bitset) clear(i int) {
	if i < 64 {
		b.lo &^= 1 << uint(i)
		return
	}
	if rest, w := b.rest(), i/64-1; w < len(rest) {
		rest[w] &^= 1 << uint(i%64)
	}
}

func (b *bitset) empty() bool {
	if b.lo != 0 {
		return false
	}
	for _, w := range b.rest() {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b *bitset) count() int {
	n := bits.OnesCount64(b.lo)
	for _, w := range b.rest() {
		n += bits.OnesCount64(w)
	}
	return n
}

// copyFrom makes b equal to o, reusing b's overflow storage.
func (b *bitset) copyFrom(o *bitset) {
	b.lo = o.lo
	if b.hi == nil {
		if o.hi == nil {
			return
		}
		b.hi = new([]uint64)
	}
	*b.hi = append((*b.hi)[:0], o.rest()...)
}
