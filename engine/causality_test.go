package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestWorker_InputDuringPassTakesEffectAtPassEnd: a pass decides its
// effects (tokens, completions, holds) when it starts, so an input that
// targets a request while the pass is in flight must not act on that
// future state at an earlier time. It takes effect at the pass's End.
func TestWorker_InputDuringPassTakesEffectAtPassEnd(t *testing.T) {
	t.Run("cancel of a hold the pass starts", func(t *testing.T) {
		w := newWorker(t, prefillArgs(32))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1}, Hold))
		out := step(t, w, &r, 0)
		end := out.End
		require.Greater(t, end, 0.0)

		assert.True(t, w.Cancel(end/2, 1), "the request is known at the pass end: it holds then")
		drive(t, w, &r, end/2)
		var kinds []EventKind
		for _, e := range r.events {
			if e.RequestID == 1 {
				kinds = append(kinds, e.Kind)
			}
		}
		assert.Equal(t, []EventKind{EventHoldStarted, EventHoldReleased}, kinds)
		start := r.eventsFor(EventHoldStarted, 1)[0]
		rel := r.eventsFor(EventHoldReleased, 1)[0]
		assert.Equal(t, end, start.At)
		assert.Equal(t, end, rel.At, "the pin ends at the pass end, not before the pin starts")
		assert.Equal(t, EndCancelled, rel.Reason)
		assert.Zero(t, rel.DurationMs)
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})

	t.Run("cancel of a running request", func(t *testing.T) {
		w := newWorker(t, smallArgs(64))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 10}, Release))
		first := step(t, w, &r, 0)
		second := step(t, w, &r, first.End)
		end := second.End // the worker's buffer, reused by later Steps
		mid := (second.Start + end) / 2

		assert.True(t, w.Cancel(mid, 1))
		drive(t, w, &r, mid)
		c := r.eventsFor(EventCancelled, 1)
		require.Len(t, c, 1)
		assert.Equal(t, end, c[0].At)
		require.Len(t, r.tokens, 2, "the pass in flight still delivers its token")
		for _, tk := range r.tokens {
			assert.LessOrEqual(t, tk.At, c[0].At, "no token after the cancellation")
		}
		assert.Empty(t, r.completions)
		assert.False(t, w.Scheduler().HasWork())
	})

	t.Run("a claim on a hold older than the pass starts at once", func(t *testing.T) {
		w := newWorker(t, prefillArgs(64, withTransfer(1)))
		var r record
		held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
		require.NoError(t, w.Submit(held, Request{ID: 2, Tokens: seqTokens(500, 9), MaxTokens: 1}, Hold))
		pass := step(t, w, &r, held)
		end := pass.End // pass is the worker's buffer, reused by later Steps
		mid := (pass.Start + end) / 2

		delay, ok := w.StartTransfer(mid, 1, 10)
		require.True(t, ok)
		assert.InDelta(t, 10, delay, 1e-9, "the held request is in no pass, so nothing waits for the pass end")
		driveAll(t, w, &r, mid)
		ts := r.eventsFor(EventTransferStart, 1)
		require.Len(t, ts, 1)
		assert.Equal(t, mid, ts[0].At)
		assert.InDelta(t, mid-held, ts[0].DurationMs, 1e-9)
		rel := r.eventsFor(EventHoldReleased, 1)
		require.Len(t, rel, 1)
		assert.InDelta(t, mid+10, rel[0].At, 1e-9)
		assert.Equal(t, Transferred, rel[0].Outcome)
	})

	t.Run("a claim on a hold the pass starts waits for its end", func(t *testing.T) {
		w := newWorker(t, prefillArgs(64, withTransfer(1)))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 9), MaxTokens: 1}, Hold))
		pass := step(t, w, &r, 0)
		end := pass.End
		mid := end / 2

		delay, ok := w.StartTransfer(mid, 1, 10)
		require.True(t, ok)
		assert.InDelta(t, end-mid+10, delay, 1e-9, "the transfer starts at the pass end, when the hold does")
		driveAll(t, w, &r, mid)
		ts := r.eventsFor(EventTransferStart, 1)
		require.Len(t, ts, 1)
		assert.Equal(t, end, ts[0].At)
		assert.InDelta(t, 10, ts[0].DelayMs, 1e-9, "the event carries the transfer time alone")
		rel := r.eventsFor(EventHoldReleased, 1)
		require.Len(t, rel, 1)
		assert.InDelta(t, mid+delay, rel[0].At, 1e-9)
	})

	t.Run("deadlines before a claim fire first, inside a pass too", func(t *testing.T) {
		const abort = 5
		for _, claimAt := range []float64{1, abort + 1} {
			w := newWorker(t, prefillArgs(64, withAbort(abort)))
			var r record
			held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
			require.NoError(t, w.Submit(held, Request{ID: 2, Tokens: seqTokens(500, 9), MaxTokens: 1}, Hold))
			pass := step(t, w, &r, held)
			require.Greater(t, pass.End, held+abort+1)

			_, ok := w.StartTransfer(held+claimAt, 1, 9)
			if claimAt < abort {
				assert.True(t, ok, "a claim before the abort deadline wins")
				d, pending := w.nextContestedDeadline()
				require.True(t, pending, "request 2's hold, started by the pass, has its own")
				assert.Equal(t, pass.End+abort, d, "the claim dropped request 1's abort deadline")
				continue
			}
			assert.False(t, ok, "a claim after the abort deadline loses")
			wake, ok := w.NextWake()
			require.True(t, ok)
			assert.Equal(t, held+abort, wake, "the abort is still delivered at its own time")
			out := w.Step(held + abort)
			require.NotNil(t, out)
			require.Len(t, out.Events, 1)
			assert.Equal(t, EventHoldReleased, out.Events[0].Kind)
			assert.Equal(t, EndAbortTimeout, out.Events[0].Reason)
			assert.Equal(t, held+abort, out.Events[0].At)
		}
	})
}

// reqItem is something a request saw, in delivery order.
type reqItem struct {
	what string
	at   float64
}

// TestVirtual_PerRequestCausality runs random arrivals, cancellations,
// releases and transfers at random times, many of them inside passes, and
// checks every request's history as delivered: times never go back, no
// output is delivered before its time, no token follows a cancellation, a
// pin ends only after it started, and nothing follows a request's end but
// the end of its pin.
func TestVirtual_PerRequestCausality(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		wt := rapid.SampledFrom([]WorkerType{WorkerAggregated, WorkerPrefill}).Draw(rt, "worker_type")
		args := smallArgs(rapid.IntRange(6, 40).Draw(rt, "blocks"), func(a *Args) {
			a.WorkerType = wt
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
			a.MaxNumBatchedTokens = intp(rapid.IntRange(8, 64).Draw(rt, "budget"))
			a.MaxNumSeqs = intp(rapid.IntRange(1, 6).Draw(rt, "seqs"))
			a.KVBytesPerToken = intp(1_000_000)
			a.KVTransferBandwidth = float64p(1)
			a.HandoffSessionTimeoutMs = 400
			if rapid.Bool().Draw(rt, "abort") {
				a.KVTransferAbortTimeoutMs = int64p(int64(rapid.IntRange(1, 100).Draw(rt, "abort_ms")))
			}
		})
		w, err := New(args, nil, 5)
		if err != nil {
			rt.Fatal(err)
		}
		v := NewVirtual(w)
		hist := map[uint64][]reqItem{}
		note := func(id uint64, what string, at float64) {
			if at > v.Now() {
				rt.Fatalf("request %d: %s stamped %.6f delivered early at %.6f", id, what, at, v.Now())
			}
			hist[id] = append(hist[id], reqItem{what, at})
		}
		v.OnOutput = func(_ int, out *Output) {
			// An Output lists its events first (they precede or open the
			// pass), then what the pass produced at its End.
			for _, e := range out.Events {
				note(e.RequestID, e.Kind.String(), e.At)
			}
			for _, rj := range out.Rejections {
				note(rj.RequestID, "rejected", rj.At)
			}
			for _, tk := range out.Tokens {
				note(tk.RequestID, "token", tk.At)
			}
			for _, c := range out.Completions {
				note(c.RequestID, "completed", c.At)
			}
			checkWorker(rt, w)
		}
		n := rapid.IntRange(1, 12).Draw(rt, "requests")
		for i := range n {
			at := rapid.Float64Range(0, 150).Draw(rt, "at")
			tokens := seqTokens(uint32(1000*(i+1)), rapid.IntRange(1, 24).Draw(rt, "len"))
			pol := rapid.SampledFrom([]CompletionPolicy{Release, Hold}).Draw(rt, "policy")
			v.Schedule(at, 0, &Submit{Request: Request{ID: uint64(i), Tokens: tokens, MaxTokens: rapid.IntRange(1, 10).Draw(rt, "max")}, Policy: pol})
		}
		for range rapid.IntRange(0, 16).Draw(rt, "inputs") {
			at := rapid.Float64Range(0, 250).Draw(rt, "input_at")
			id := uint64(rapid.IntRange(0, n-1).Draw(rt, "id"))
			switch rapid.IntRange(0, 2).Draw(rt, "input") {
			case 0:
				v.Schedule(at, 0, Cancel{ID: id})
			case 1:
				v.Schedule(at, 0, ReleaseHeld{ID: id, Outcome: rapid.SampledFrom([]Outcome{Transferred, Aborted}).Draw(rt, "outcome")})
			default:
				v.Schedule(at, 0, StartTransfer{ID: id, Tokens: rapid.IntRange(0, 30).Draw(rt, "transfer_tokens")})
			}
		}
		if err := v.Run(); err != nil {
			rt.Fatal(err)
		}

		for id, items := range hist {
			started, ended, cancelledAt := false, false, -1.0
			for i, it := range items {
				if i > 0 && it.at < items[i-1].at {
					rt.Fatalf("request %d: %s at %.6f after %s at %.6f: %v", id, it.what, it.at, items[i-1].what, items[i-1].at, items)
				}
				switch it.what {
				case "token":
					if cancelledAt >= 0 {
						rt.Fatalf("request %d: token at %.6f after its cancellation at %.6f", id, it.at, cancelledAt)
					}
					if ended {
						rt.Fatalf("request %d: token after its end: %v", id, items)
					}
				case "cancelled", "rejected":
					cancelledAt = it.at
					ended = true
				case "completed":
					if ended {
						rt.Fatalf("request %d: completed after its end: %v", id, items)
					}
					ended = true
				case EventHoldStarted.String():
					started = true
				case EventTransferStart.String(), EventHoldReleased.String():
					if !started {
						rt.Fatalf("request %d: %s before its pin started: %v", id, it.what, items)
					}
				}
			}
		}
		if m := w.Metrics(); m.ActiveBlocks != 0 || m.HeldRequests != 0 {
			rt.Fatalf("after the run: %+v", m)
		}
	})
}

// String makes failure messages readable.
func (it reqItem) String() string { return fmt.Sprintf("%s@%.3f", it.what, it.at) }

// TestSortEventsByAt_SameAsAStableSort: a worker's pending events come out
// in the order a stable sort by time gives, ties (equal times, and the
// infinities) in the order they were made.
func TestSortEventsByAt_SameAsAStableSort(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		times := []float64{0, 1, 1.5, 2, 250, math.Inf(1), math.Inf(-1)}
		n := rapid.IntRange(0, 40).Draw(rt, "n")
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = Event{At: rapid.SampledFrom(times).Draw(rt, "at"), RequestID: uint64(i)}
		}
		want := slices.Clone(evs)
		slices.SortStableFunc(want, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
		sortEventsByAt(evs)
		if !slices.Equal(evs, want) {
			rt.Fatalf("got %v, want %v", evs, want)
		}
	})
}
