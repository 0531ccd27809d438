package engine

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestVirtual_CallEachIsCallsInOrder: a CallEach run, or a CallStream run
// of as many calls, fires exactly where
// the same calls made one by one with Call would, among calls scheduled
// before and after it and by the calls themselves, ties included.
func TestVirtual_CallEachIsCallsInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		times := func(label string) []float64 {
			ts := rapid.SliceOfN(rapid.IntRange(0, 6), 0, 12).Draw(t, label)
			out := make([]float64, len(ts))
			for i, x := range ts {
				out[i] = float64(x)
			}
			return out
		}
		before, after := times("before"), times("after")
		batch := times("batch")
		slices.Sort(batch)
		start := float64(rapid.IntRange(0, 3).Draw(t, "start"))
		spawn := rapid.IntRange(0, 3).Draw(t, "spawn")

		type mode int
		const (
			calls mode = iota
			each
			stream
		)
		run := func(m mode) []string {
			v := NewVirtual()
			var log []string
			call := func(name string, at float64) {
				v.Call(at, func() {
					log = append(log, name)
					// Some calls schedule more at their own time and later.
					if len(log)%4 == 0 {
						for k := range spawn {
							v.Call(v.Now()+float64(k), func() { log = append(log, name+"'") })
						}
					}
				})
			}
			v.AdvanceTo(start)
			for i, at := range before {
				call("b"+string(rune('a'+i)), at)
			}
			switch m {
			case each:
				v.CallEach(len(batch), func(i int) float64 { return batch[i] }, func(i int) {
					log = append(log, "x"+string(rune('a'+i)))
				})
			case stream:
				v.CallStream(func(i int) (float64, bool) {
					if i >= len(batch) {
						return 0, false
					}
					return batch[i], true
				}, func(i int) { log = append(log, "x"+string(rune('a'+i))) })
			default:
				for i, at := range batch {
					v.Call(at, func() { log = append(log, "x"+string(rune('a'+i))) })
				}
			}
			for i, at := range after {
				call("a"+string(rune('a'+i)), at)
			}
			require.NoError(t, v.Run())
			return log
		}
		want := run(calls)
		require.Equal(t, want, run(each))
		require.Equal(t, want, run(stream), "a stream of n calls takes the places CallEach's n calls take")
	})
}

// TestVirtual_QueueOrder: calls scheduled at random times, some from
// inside other calls, run in time order, ties in the order they were
// scheduled, however the queue's heap is laid out.
func TestVirtual_QueueOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := NewVirtual()
		type key struct {
			at  float64
			seq int
		}
		var scheduled, ran []key
		var schedule func(at float64, depth int)
		schedule = func(at float64, depth int) {
			k := key{at, len(scheduled)}
			scheduled = append(scheduled, k)
			v.Call(at, func() {
				ran = append(ran, k)
				if depth < 2 {
					for range rapid.IntRange(0, 2).Draw(t, "spawn") {
						schedule(v.Now()+float64(rapid.IntRange(0, 5).Draw(t, "later")), depth+1)
					}
				}
			})
		}
		for range rapid.IntRange(0, 60).Draw(t, "calls") {
			schedule(float64(rapid.IntRange(0, 20).Draw(t, "at")), 0)
		}
		require.NoError(t, v.Run())
		want := slices.Clone(scheduled)
		slices.SortStableFunc(want, func(a, b key) int {
			if a.at != b.at {
				if a.at < b.at {
					return -1
				}
				return 1
			}
			return a.seq - b.seq
		})
		require.Equal(t, want, ran)
	})
}
