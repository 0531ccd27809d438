package idtab

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestTable_AnswersAsAMap: any sequence of sets and deletes, of ids near a
// sliding window, far from it, colliding in their low bits or the largest
// id, leaves the table holding what a map would, and every read on the way
// agrees with the map's.
func TestTable_AnswersAsAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab Table[int]
		model := map[uint64]int{}
		var used []uint64 // every id drawn so far
		next := uint64(0)
		id := func() uint64 {
			var k uint64
			switch {
			case len(used) > 0 && rapid.Bool().Draw(t, "again"):
				k = rapid.SampledFrom(used).Draw(t, "used")
				switch rapid.IntRange(0, 2).Draw(t, "twin") {
				case 1: // an id sharing k's low bits
					k += rapid.Uint64Range(1, 3).Draw(t, "k") << rapid.IntRange(6, 10).Draw(t, "bit")
				case 2:
					k -= rapid.Uint64Range(1, 3).Draw(t, "k") << rapid.IntRange(6, 10).Draw(t, "bit")
				}
			default:
				switch rapid.IntRange(0, 3).Draw(t, "shape") {
				case 0: // the newest ids
					next += rapid.Uint64Range(0, 3).Draw(t, "step")
					k = next
				case 1:
					k = math.MaxUint64 - rapid.Uint64Range(0, 1).Draw(t, "top")
				case 2:
					k = rapid.Uint64().Draw(t, "any")
				default:
					k = rapid.Uint64Range(0, next+2).Draw(t, "old")
				}
			}
			used = append(used, k)
			return k
		}
		// Runs that delete about as often as they set keep few ids in use:
		// the slots are sparse then, and an id whose slot is taken goes to
		// far.
		deletes := rapid.IntRange(0, 3).Draw(t, "deletes")
		for range rapid.IntRange(1, 300).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 3+deletes).Draw(t, "op"); {
			case op < 2:
				k, v := id(), rapid.Int().Draw(t, "v")
				tab.Set(k, v)
				model[k] = v
			case op == 2:
				k := id()
				got, ok := tab.Get(k)
				want, wok := model[k]
				if ok != wok || got != want || tab.Has(k) != wok {
					t.Fatalf("Get(%d) = %d, %v; the map has %d, %v", k, got, ok, want, wok)
				}
			default:
				k := id()
				tab.Delete(k)
				delete(model, k)
			}
			if tab.Len() != len(model) {
				t.Fatalf("Len %d, the map has %d", tab.Len(), len(model))
			}
		}
		seen := map[uint64]int{}
		for k, v := range tab.All() {
			if _, dup := seen[k]; dup {
				t.Fatalf("All yields %d twice", k)
			}
			seen[k] = v
		}
		if len(seen) != len(model) {
			t.Fatalf("All yields %d ids, the map has %d", len(seen), len(model))
		}
		for k, v := range model {
			if seen[k] != v {
				t.Fatalf("All yields %d for %d, the map has %d", seen[k], k, v)
			}
		}
	})
}

// TestTable_ASlidingWindowStaysInSlots: ids in use a window of 1,000
// consecutive ids sliding up by a million never leave the slots, and the
// slots stay within twice what the window needs.
func TestTable_ASlidingWindowStaysInSlots(t *testing.T) {
	var tab Table[uint64]
	const window = 1000
	for id := uint64(0); id < 1_000_000; id++ {
		tab.Set(id, id*3)
		if id >= window {
			old := id - window
			if v, ok := tab.Get(old); !ok || v != old*3 {
				t.Fatalf("id %d: got %d, %v", old, v, ok)
			}
			tab.Delete(old)
		}
	}
	if len(tab.far) != 0 || tab.Len() != window {
		t.Fatalf("%d ids in far, %d in all; want none in far and %d in all", len(tab.far), tab.Len(), window)
	}
	if len(tab.slots) > 2048 {
		t.Fatalf("%d slots for a window of %d ids", len(tab.slots), window)
	}
}

// TestTable_ALongLivedIdDoesNotGrowTheSlots: one id that stays while a
// window of 100 slides a hundred thousand ids past it costs a few ids a
// place in far, not slots without end.
func TestTable_ALongLivedIdDoesNotGrowTheSlots(t *testing.T) {
	var tab Table[int]
	tab.Set(0, -1)
	const window = 100
	for id := uint64(1); id < 100_000; id++ {
		tab.Set(id, int(id))
		if id > window {
			tab.Delete(id - window)
		}
	}
	if v, ok := tab.Get(0); !ok || v != -1 {
		t.Fatalf("the long-lived id reads %d, %v", v, ok)
	}
	if len(tab.slots) > 8*(window+2) { // grown only while a quarter full
		t.Fatalf("%d slots for %d ids", len(tab.slots), tab.Len())
	}
	var ids []uint64
	for id := range tab.All() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) != window+1 || ids[0] != 0 || ids[1] != 100_000-window {
		t.Fatalf("All yields %d ids from %v", len(ids), ids[:min(3, len(ids))])
	}
}
