// Package idtab keeps values by request or transfer id. Ids are handed out
// counting up and mostly end in about the order they began, so the ids in
// use at any moment lie in a window that slides up the number line. Table
// stores an id in the slot its low bits name, a direct index that finds
// one with a single read, where a hash map hashes the id and probes a
// group of slots that the rest of a busy run has long pushed out of cache.
//
// Any ids work: one whose slot is taken by another id in use (an id that
// lived much longer than its neighbours, ids chosen at random) goes to a
// map beside the slots, so a table of arbitrary ids is no worse than a map
// with a failed read in front of it.
package idtab

import (
	"iter"
	"math"
)

// minSlots is the size of a table's first slice of slots.
const minSlots = 64

// Table maps uint64 ids to values of V. The zero value is empty and ready
// to use. It is not safe for concurrent use.
type Table[V any] struct {
	slots []slot[V]
	mask  uint64
	n     int // ids in slots
	// far holds the ids whose slot another id held when they were put,
	// and math.MaxUint64, which no slot can name.
	far map[uint64]V
}

// slot is one id and its value. id1 is the id plus one, so the zero slot
// is empty.
type slot[V any] struct {
	id1 uint64
	v   V
}

// Len is the number of ids in the table.
func (t *Table[V]) Len() int { return t.n + len(t.far) }

// Get returns the value for id and whether the table has it.
func (t *Table[V]) Get(id uint64) (V, bool) {
	if t.slots != nil {
		if s := &t.slots[id&t.mask]; s.id1 == id+1 && id != math.MaxUint64 {
			return s.v, true
		}
	}
	if t.far != nil {
		v, ok := t.far[id]
		return v, ok
	}
	var zero V
	return zero, false
}

// Has reports whether the table has id.
func (t *Table[V]) Has(id uint64) bool {
	_, ok := t.Get(id)
	return ok
}

// Set makes v the value for id, adding id if the table lacks it.
func (t *Table[V]) Set(id uint64, v V) {
	if id == math.MaxUint64 {
		t.setFar(id, v)
		return
	}
	if t.slots == nil {
		t.grow(minSlots)
	}
	s := &t.slots[id&t.mask]
	switch s.id1 {
	case id + 1:
		s.v = v
		return
	case 0:
		if _, ok := t.far[id]; !ok {
			*s = slot[V]{id1: id + 1, v: v}
			t.n++
			return
		}
		t.far[id] = v
		return
	}
	if _, ok := t.far[id]; ok {
		t.far[id] = v
		return
	}
	// The slot is another id's. Double the slots while they would still
	// be at least a quarter full, which a window of consecutive ids in use
	// keeps them; past that, the ids are too far apart for slots to pay.
	if len(t.slots) < 4*(t.Len()+1) {
		t.grow(2 * len(t.slots))
		t.Set(id, v)
		return
	}
	t.setFar(id, v)
}

// Delete removes id, if the table has it.
func (t *Table[V]) Delete(id uint64) {
	if t.slots != nil {
		if s := &t.slots[id&t.mask]; s.id1 == id+1 && id != math.MaxUint64 {
			*s = slot[V]{}
			t.n--
			return
		}
	}
	delete(t.far, id)
}

// All yields every id and its value: the ids in slots in the order of
// their slots, then the others in no set order. The table must not change
// during the iteration.
func (t *Table[V]) All() iter.Seq2[uint64, V] {
	return func(yield func(uint64, V) bool) {
		for i := range t.slots {
			if s := &t.slots[i]; s.id1 != 0 && !yield(s.id1-1, s.v) {
				return
			}
		}
		for id, v := range t.far {
			if !yield(id, v) {
				return
			}
		}
	}
}

func (t *Table[V]) setFar(id uint64, v V) {
	if t.far == nil {
		t.far = make(map[uint64]V)
	}
	t.far[id] = v
}

// grow replaces the slots with size empty ones, size a power of two at
// least their number, and puts every id back. Ids in different slots
// differ in their low bits, and so in their longer low bits: they land in
// different slots again.
func (t *Table[V]) grow(size int) {
	old := t.slots
	t.slots, t.mask = make([]slot[V], size), uint64(size-1)
	for i := range old {
		if s := &old[i]; s.id1 != 0 {
			t.slots[(s.id1-1)&t.mask] = *s
		}
	}
	// An id in far whose slot came free moves home.
	for id, v := range t.far {
		if id == math.MaxUint64 {
			continue
		}
		if d := &t.slots[id&t.mask]; d.id1 == 0 {
			*d = slot[V]{id1: id + 1, v: v}
			t.n++
			delete(t.far, id)
		}
	}
}
