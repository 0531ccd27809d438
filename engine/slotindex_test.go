package engine

import (
	"testing"

	"github.com/kvstrand/mocker/kv"
	"pgregory.net/rapid"
)

// TestSlotIndex_MatchesMap drives a slotIndex and a map with the same
// adds and removes, over hashes that share their low 32 bits (and so their
// home and their kept bits) far more often than XXH3 outputs would, and
// checks every lookup agrees.
func TestSlotIndex_MatchesMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "blocks")
		blocks := make([]pblock, n)
		x := newSlotIndex(rapid.IntRange(0, n).Draw(rt, "sized"))
		want := map[kv.SeqHash]int32{}
		hash := func(label string) kv.SeqHash {
			return kv.SeqHash(rapid.Uint64Range(0, 3).Draw(rt, label+"hi")<<32 | rapid.Uint64Range(0, 20).Draw(rt, label+"lo"))
		}
		for range rapid.IntRange(1, 300).Draw(rt, "ops") {
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0: // a free block takes a hash
				s := int32(rapid.IntRange(0, n-1).Draw(rt, "slot"))
				if blocks[s].indexed() {
					continue
				}
				h := hash("add")
				blocks[s].hash = h
				_, had := want[h]
				if added := x.add(h, s, blocks); added == had {
					rt.Fatalf("add %x: added %v, map had it %v", uint64(h), added, had)
				}
				if !had {
					want[h] = s
					blocks[s].run = runRoot
				}
			case 1: // an indexed block is evicted
				s := int32(rapid.IntRange(0, n-1).Draw(rt, "slot"))
				if !blocks[s].indexed() {
					continue
				}
				if !x.removeSlot(blocks[s].hash, s) {
					rt.Fatalf("remove %x: not found", uint64(blocks[s].hash))
				}
				delete(want, blocks[s].hash)
				blocks[s] = pblock{}
			case 2:
				h := hash("get")
				s, ok := x.get(h, blocks)
				ws, wok := want[h]
				if ok != wok || ok && s != ws {
					rt.Fatalf("get %x: %d %v, map %d %v", uint64(h), s, ok, ws, wok)
				}
			}
			if x.n != len(want) {
				rt.Fatalf("n %d, map %d", x.n, len(want))
			}
		}
		for h, s := range want {
			if got, ok := x.get(h, blocks); !ok || got != s {
				rt.Fatalf("final get %x: %d %v, want %d", uint64(h), got, ok, s)
			}
		}
	})
}
