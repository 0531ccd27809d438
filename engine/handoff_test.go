package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func int64p(v int64) *int64       { return &v }
func float64p(v float64) *float64 { return &v }

// withAbort sets kv_transfer_abort_timeout_ms.
func withAbort(ms int64) func(*Args) {
	return func(a *Args) { a.KVTransferAbortTimeoutMs = int64p(ms) }
}

// withTransfer makes a transfer cost msPerToken modeled ms per token:
// 1e6 bytes per token over 1/msPerToken GB/s.
func withTransfer(msPerToken float64) func(*Args) {
	return func(a *Args) {
		a.KVBytesPerToken = intp(1_000_000)
		a.KVTransferBandwidth = float64p(1 / msPerToken)
	}
}

func decodeArgs(n int, mod ...func(*Args)) Args {
	return smallArgs(n, append([]func(*Args){func(a *Args) { a.WorkerType = WorkerDecode }}, mod...)...)
}

func (r *record) eventsFor(k EventKind, id uint64) []Event {
	var out []Event
	for _, e := range r.events {
		if e.Kind == k && e.RequestID == id {
			out = append(out, e)
		}
	}
	return out
}

// holdOne submits a held prefill and drives it to SourceHeld, returning the
// hold's start time.
func holdOne(t *testing.T, w *Worker, r *record, now float64, id uint64, tokens []uint32) float64 {
	t.Helper()
	require.NoError(t, w.Submit(now, Request{ID: id, Tokens: tokens, MaxTokens: 1}, Hold))
	drive(t, w, r, now)
	hs := r.eventsFor(EventHoldStarted, id)
	require.Len(t, hs, 1)
	return hs[0].At
}

func TestHandoff_AbortClockStartsAtHold(t *testing.T) {
	const abort = 100
	w := newWorker(t, prefillArgs(8, withAbort(abort)))
	var r record
	// Requests 1 and 2 fill the pool with held KV; request 3 arrives at 0
	// and queues behind them until their aborts free the pool.
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 16), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 3, Tokens: seqTokens(300, 16), MaxTokens: 1}, Hold))
	driveAll(t, w, &r, 0)

	first := r.eventsFor(EventHoldStarted, 1)[0].At
	start := r.eventsFor(EventHoldStarted, 3)
	require.Len(t, start, 1)
	assert.Greater(t, start[0].At, first+abort, "request 3 queued for longer than the abort timeout before its prefill")
	end := r.eventsFor(EventHoldReleased, 3)
	require.Len(t, end, 1)
	assert.Equal(t, Aborted, end[0].Outcome)
	assert.Equal(t, EndAbortTimeout, end[0].Reason)
	assert.Equal(t, start[0].At+abort, end[0].At, "the abort clock starts at the hold, not at submit")
	assert.Equal(t, float64(abort), end[0].DurationMs)
	assert.Zero(t, w.Metrics().HeldRequests)
}

func TestHandoff_SourceReleasedAfterTransfer(t *testing.T) {
	// A decode worker that already has the first two blocks (8 tokens) of
	// the prompt resident, from an earlier handoff with the same prefix.
	prefix := seqTokens(1000, 8)
	warm := append(append([]uint32(nil), prefix...), seqTokens(5000, 4)...)
	prompt := append(append([]uint32(nil), prefix...), seqTokens(7000, 5)...) // 13 tokens

	for _, tc := range []struct {
		mode   TransferTimingMode
		tokens int     // charged
		delay  float64 // 2 ms per token
	}{
		{TransferFullPrompt, 13, 26},
		// 8 of the 13 tokens (2 blocks of 4) are resident; the other 5
		// span 2 blocks, and a transfer moves whole blocks: 2 × 4 = 8
		// tokens, as Dynamo charges them.
		{TransferDestinationMissing, 8, 16},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			dec := newWorker(t, decodeArgs(64))
			var dr record
			require.NoError(t, dec.Reserve(0, Request{ID: 50, Tokens: warm, MaxTokens: 2}))
			now := drive(t, dec, &dr, 0)
			require.True(t, dec.Activate(now, 50))
			now = drive(t, dec, &dr, now)
			_, done := dr.completion(50)
			require.True(t, done)

			require.NoError(t, dec.Reserve(now, Request{ID: 1, Tokens: prompt, MaxTokens: 4}))
			drive(t, dec, &dr, now)
			res := dr.eventsFor(EventDecodeReserved, 1)
			require.Len(t, res, 1)
			assert.Equal(t, 8, res[0].MissingTokens, "8 of 13 prompt tokens are resident: 2 of 4 blocks are missing")

			pre := newWorker(t, prefillArgs(64, withTransfer(2), func(a *Args) { a.KVTransferTimingMode = tc.mode }))
			var pr record
			held := holdOne(t, pre, &pr, 0, 1, prompt)
			startAt := held + 10
			n := TransferTokens(tc.mode, len(prompt), res[0].MissingTokens)
			require.Equal(t, tc.tokens, n)
			delay, ok := pre.StartTransfer(startAt, 1, n)
			require.True(t, ok)
			assert.InDelta(t, tc.delay, delay, 1e-9)

			// Until the transfer completes the source still holds its KV.
			m := pre.Metrics()
			assert.Equal(t, 1, m.HeldRequests)
			assert.Equal(t, 1, m.TransferringRequests)
			assert.Equal(t, 4, m.HeldBlocks)
			dl, ok := pre.NextDeadline()
			require.True(t, ok)
			assert.Equal(t, startAt+delay, dl)
			if out := pre.Step(dl - 0.001); out != nil {
				pr.add(out)
			}
			assert.Empty(t, pr.eventsOf(EventHoldReleased), "not released before the transfer completes")
			assert.Equal(t, 1, pre.Metrics().HeldRequests)

			driveAll(t, pre, &pr, startAt)
			ts := pr.eventsFor(EventTransferStart, 1)
			require.Len(t, ts, 1)
			assert.Equal(t, startAt, ts[0].At)
			assert.Equal(t, tc.tokens, ts[0].TransferTokens)
			assert.InDelta(t, tc.delay, ts[0].DelayMs, 1e-9)
			end := pr.eventsFor(EventHoldReleased, 1)
			require.Len(t, end, 1)
			assert.Equal(t, Transferred, end[0].Outcome)
			assert.Equal(t, EndTransferComplete, end[0].Reason)
			assert.InDelta(t, startAt+tc.delay, end[0].At, 1e-9)
			assert.InDelta(t, 10+tc.delay, end[0].DurationMs, 1e-9)
			m = pre.Metrics()
			assert.Zero(t, m.HeldRequests)
			assert.Zero(t, m.TransferringRequests)
			assert.Zero(t, m.ActiveBlocks)
		})
	}
}

func TestHandoff_DecodeReservesThroughScheduler(t *testing.T) {
	t.Run("blocks", func(t *testing.T) {
		w := newWorker(t, decodeArgs(8))
		var r record
		for i := range 3 {
			require.NoError(t, w.Reserve(0, Request{ID: uint64(i + 1), Tokens: seqTokens(uint32(100*(i+1)), 16), MaxTokens: 3}))
		}
		now := drive(t, w, &r, 0)
		m := w.Metrics()
		assert.Equal(t, 2, m.ReservedRequests)
		assert.Equal(t, 8, m.ReservedBlocks)
		assert.Equal(t, 8, m.ActiveBlocks, "reservations are in the capacity view")
		assert.Equal(t, 8, m.RouterActiveBlocks, "and in the router-facing view: they are decode load")
		assert.Equal(t, 1, m.Waiting)
		assert.Len(t, r.eventsOf(EventDecodeWaitStart), 3)
		assert.Empty(t, r.eventsFor(EventDecodeReserved, 3))

		// No decode-side timer: the waiting reservation never gives up.
		_, ok := w.NextWake()
		assert.False(t, ok, "a decode worker with only reservations parks")
		_, ok = w.NextDeadline()
		assert.False(t, ok)
		assert.Nil(t, w.Step(1e9))
		assert.Equal(t, 1, w.Metrics().Waiting)

		require.True(t, w.CancelDestination(1e9, 1))
		drive(t, w, &r, 1e9)
		res := r.eventsFor(EventDecodeReserved, 3)
		require.Len(t, res, 1)
		assert.Equal(t, 1e9, res[0].At)
		assert.Equal(t, 1e9, res[0].DurationMs, "it waited from 0")
		assert.Equal(t, 16, res[0].MissingTokens)
		assert.Len(t, r.eventsFor(EventDestinationCancelled, 1), 1)
		_ = now
	})
	t.Run("max_num_seqs", func(t *testing.T) {
		w := newWorker(t, decodeArgs(64, func(a *Args) { a.MaxNumSeqs = intp(1) }))
		var r record
		require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(100, 9), MaxTokens: 3}))
		require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(200, 9), MaxTokens: 3}))
		now := drive(t, w, &r, 0)
		// As in Dynamo and vLLM, a reservation holds KV but no running
		// slot: both reserve at once although max_num_seqs is 1.
		m := w.Metrics()
		assert.Equal(t, 2, m.ReservedRequests, "reservations take no sequence slot")
		assert.Equal(t, 0, m.Waiting)
		assert.Equal(t, 2, m.DynamoWaiting, "Dynamo counts reserved destinations as waiting")
		for _, id := range []uint64{1, 2} {
			res := r.eventsFor(EventDecodeReserved, id)
			require.Len(t, res, 1)
			assert.Equal(t, 0.0, res[0].At, "reserved on arrival")
		}

		// Activated, they queue for the one slot.
		require.True(t, w.Activate(now+5, 1))
		require.True(t, w.Activate(now+5, 2))
		m = w.Metrics()
		assert.Equal(t, 0, m.ReservedRequests)
		assert.Equal(t, 2, m.Waiting, "activated destinations wait for a slot")
		now = drive(t, w, &r, now+5)
		c1, ok := r.completion(1)
		require.True(t, ok)
		assert.Equal(t, 3, c1.OutputTokens, "the prefill's token plus two decoded ones")
		c2, ok := r.completion(2)
		require.True(t, ok)
		var idx []int
		first2 := -1.0
		for _, tk := range r.tokens {
			if tk.RequestID == 1 {
				idx = append(idx, tk.Index)
			}
			if tk.RequestID == 2 && first2 < 0 {
				first2 = tk.At
			}
		}
		assert.Equal(t, []int{1, 2}, idx, "decoding continues after the prefill's token 0")
		assert.Greater(t, first2, c1.At, "request 2 runs only once request 1 frees the slot")
		assert.Greater(t, c2.At, c1.At)
		_ = now
	})
}

func TestHandoff_SessionTimeoutReclaimsHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		abort  int64 // 0: unset
		after  float64
		reason EndReason
	}{
		{"no abort timeout", 0, 500, EndSessionTimeout},
		{"abort first", 200, 200, EndAbortTimeout},
		{"session first", 900, 500, EndSessionTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, prefillArgs(16, func(a *Args) {
				a.HandoffSessionTimeoutMs = 500
				if tc.abort > 0 {
					a.KVTransferAbortTimeoutMs = int64p(tc.abort)
				}
			}))
			var r record
			held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
			driveAll(t, w, &r, held)
			end := r.eventsFor(EventHoldReleased, 1)
			require.Len(t, end, 1)
			assert.Equal(t, Aborted, end[0].Outcome)
			assert.Equal(t, tc.reason, end[0].Reason)
			assert.Equal(t, held+tc.after, end[0].At)
			assert.Zero(t, w.Metrics().ActiveBlocks)
			_, ok := w.NextWake()
			assert.False(t, ok, "nothing left: the worker parks")
		})
	}
}

func TestHandoff_HeldKVQueuesLaterPrefills(t *testing.T) {
	const abort = 100
	w := newWorker(t, prefillArgs(8, withAbort(abort)))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 16), MaxTokens: 1}, Hold))
	now := drive(t, w, &r, 0)
	held := r.eventsFor(EventHoldStarted, 1)[0].At
	require.Equal(t, 8, w.Metrics().HeldBlocks)

	require.NoError(t, w.Submit(now+5, Request{ID: 3, Tokens: seqTokens(300, 8), MaxTokens: 1}, Hold))
	passes := w.Passes()
	drive(t, w, &r, now+5)
	assert.Equal(t, passes, w.Passes(), "the later prefill cannot run while held KV fills the pool")
	assert.Equal(t, 1, w.Metrics().Waiting)
	wake, ok := w.NextWake()
	require.True(t, ok)
	assert.Equal(t, held+abort, wake, "the worker next wakes for the abort")

	out := step(t, w, &r, wake)
	assert.True(t, out.Ran, "the abort frees the pool and the waiting prefill runs in the same step")
	assert.Equal(t, held+abort, out.Start)
	kinds := []EventKind{}
	for _, e := range out.Events {
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []EventKind{EventHoldReleased, EventHoldReleased, EventHoldStarted}, kinds)
	c, ok := r.completion(3)
	require.True(t, ok)
	assert.Greater(t, c.FirstTokenAt, held+abort)
}

func TestHandoff_ReleaseIdempotent(t *testing.T) {
	t.Run("late StartTransfer after abort", func(t *testing.T) {
		w := newWorker(t, prefillArgs(16, withAbort(50)))
		var r record
		held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
		// No Step between the deadline and the input: the input applies the
		// abort first, then finds nothing to transfer.
		_, ok := w.StartTransfer(held+60, 1, 9)
		assert.False(t, ok, "a decode arriving after the abort gets ok=false")
		assert.False(t, w.ReleaseHeld(held+61, 1, Transferred))
		assert.False(t, w.Cancel(held+62, 1))
		driveAll(t, w, &r, held+62)
		end := r.eventsFor(EventHoldReleased, 1)
		require.Len(t, end, 1)
		assert.Equal(t, held+50, end[0].At)
		assert.Empty(t, r.eventsOf(EventTransferStart))
	})
	t.Run("release during transfer", func(t *testing.T) {
		w := newWorker(t, prefillArgs(16, withTransfer(10)))
		var r record
		held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
		_, ok := w.StartTransfer(held+1, 1, 9)
		require.True(t, ok)
		_, ok = w.StartTransfer(held+2, 1, 9)
		assert.False(t, ok, "a hold transfers once")
		assert.True(t, w.ReleaseHeld(held+3, 1, Aborted))
		assert.False(t, w.ReleaseHeld(held+4, 1, Aborted))
		driveAll(t, w, &r, held+4)
		end := r.eventsFor(EventHoldReleased, 1)
		require.Len(t, end, 1, "the transfer's completion does not release it again")
		assert.Equal(t, Aborted, end[0].Outcome)
		assert.Equal(t, EndReleased, end[0].Reason)
		assert.Zero(t, w.Metrics().TransferringRequests)
	})
	t.Run("destination", func(t *testing.T) {
		w := newWorker(t, decodeArgs(16))
		var r record
		require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(1, 9), MaxTokens: 3}))
		drive(t, w, &r, 0)
		assert.True(t, w.CancelDestination(1, 1))
		assert.False(t, w.CancelDestination(2, 1))
		assert.False(t, w.Activate(3, 1), "an aborted transfer's ACK finds nothing")
		assert.False(t, w.Activate(3, 99))
		drive(t, w, &r, 3)
		assert.Len(t, r.eventsOf(EventDestinationCancelled), 1)
		assert.Empty(t, r.eventsOf(EventDestinationActivated))
		m := w.Metrics()
		assert.Zero(t, m.ReservedRequests)
		assert.Zero(t, m.ReservedBlocks)
		assert.Zero(t, m.ActiveBlocks)
	})
}

func TestHandoff_AggregatedNeverHolds(t *testing.T) {
	w := newWorker(t, smallArgs(64, withAbort(10), withTransfer(1)))
	var r record
	for i := range 4 {
		require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: seqTokens(uint32(100*i), 9), MaxTokens: 3}, Release))
	}
	now := driveAll(t, w, &r, 0)
	require.Len(t, r.completions, 4)
	assert.Empty(t, r.eventsOf(EventHoldStarted))
	_, ok := w.NextDeadline()
	assert.False(t, ok, "no hold, no deadline")
	for i := range 4 {
		_, ok := w.StartTransfer(now, uint64(i), 9)
		assert.False(t, ok)
	}
	assert.Zero(t, w.Metrics().HeldRequests)
}

func TestHandoff_TransferStartCancelsAbortDeadline(t *testing.T) {
	w := newWorker(t, prefillArgs(16, withAbort(50), withTransfer(10)))
	var r record
	held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
	delay, ok := w.StartTransfer(held+10, 1, 9)
	require.True(t, ok)
	require.InDelta(t, 90, delay, 1e-9)
	dl, ok := w.NextDeadline()
	require.True(t, ok)
	assert.InDelta(t, held+100, dl, 1e-9, "the abort deadline at held+50 no longer applies")
	driveAll(t, w, &r, held+10)
	end := r.eventsFor(EventHoldReleased, 1)
	require.Len(t, end, 1)
	assert.Equal(t, Transferred, end[0].Outcome)
	assert.InDelta(t, held+100, end[0].At, 1e-9)
}

func TestHandoff_EventsInTimeOrder(t *testing.T) {
	t.Run("worker", func(t *testing.T) {
		w := newWorker(t, prefillArgs(32, withAbort(100), withTransfer(30.0/9)))
		var r record
		for i := range 3 {
			require.NoError(t, w.Submit(0, Request{ID: uint64(i + 1), Tokens: seqTokens(uint32(100*(i+1)), 9), MaxTokens: 1}, Hold))
		}
		h := drive(t, w, &r, 0)
		// Inputs between passes and timers, with no Step in between.
		_, ok := w.StartTransfer(h+20, 1, 9) // completes at h+50
		require.True(t, ok)
		require.True(t, w.ReleaseHeld(h+70, 2, Aborted))
		out := w.Step(h + 150) // request 3's abort fired at h+100
		require.NotNil(t, out)
		type ev struct {
			kind EventKind
			id   uint64
			at   float64
		}
		var got []ev
		for _, e := range out.Events {
			got = append(got, ev{e.Kind, e.RequestID, e.At})
		}
		require.Len(t, got, 4)
		want := []ev{{EventTransferStart, 1, h + 20}, {EventHoldReleased, 1, h + 50}, {EventHoldReleased, 2, h + 70}, {EventHoldReleased, 3, h + 100}}
		for i := range want {
			assert.Equal(t, want[i].kind, got[i].kind, "event %d", i)
			assert.Equal(t, want[i].id, got[i].id, "event %d", i)
			assert.InDelta(t, want[i].at, got[i].at, 1e-9, "event %d", i)
		}
	})
	t.Run("virtual delivers deadlines on time", func(t *testing.T) {
		// Request 1 holds with a 20 ms abort timeout while request 2's long
		// prefill is in flight: the abort is delivered at its deadline, not
		// at the end of the pass.
		w := newWorker(t, prefillArgs(256, withAbort(20)))
		v := NewVirtual(w)
		var delivered []Event
		var at []float64
		v.OnOutput = func(_ int, out *Output) {
			for _, e := range out.Events {
				delivered = append(delivered, e)
				at = append(at, v.Now())
			}
		}
		v.Schedule(0, 0, &Submit{Request: Request{ID: 1, Tokens: seqTokens(1, 9), MaxTokens: 1}, Policy: Hold})
		v.Schedule(17, 0, &Submit{Request: Request{ID: 2, Tokens: seqTokens(5000, 900), MaxTokens: 1}, Policy: Hold})
		require.NoError(t, v.Run())
		var found bool
		for i, e := range delivered {
			if i > 0 {
				assert.LessOrEqual(t, delivered[i-1].At, e.At, "events come out in time order")
			}
			if e.Kind == EventHoldReleased && e.RequestID == 1 {
				found = true
				assert.Equal(t, EndAbortTimeout, e.Reason)
				assert.Equal(t, e.At, at[i], "delivered exactly at the deadline")
				hs := delivered[0]
				require.Equal(t, EventHoldStarted, hs.Kind)
				assert.Equal(t, hs.At+20, e.At)
			}
		}
		require.True(t, found)
		s2 := func() Event {
			for _, e := range delivered {
				if e.Kind == EventHoldStarted && e.RequestID == 2 {
					return e
				}
			}
			return Event{}
		}()
		assert.Greater(t, s2.At, delivered[0].At+20, "the deadline fell inside request 2's pass")
	})
}

// TestHandoff_ActivationStopsAtMaxModelLen: a disaggregated request
// generates exactly as many tokens as the same request served aggregated
// when max_model_len is what stops it, counting the prefill's first token.
func TestHandoff_ActivationStopsAtMaxModelLen(t *testing.T) {
	const prompt = 10
	for _, limit := range []int{prompt + 1, prompt + 2, prompt + 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			lim := func(a *Args) { a.MaxModelLen = intp(limit) }
			req := Request{ID: 1, Tokens: seqTokens(1, prompt), MaxTokens: 8}

			agg := newWorker(t, smallArgs(64, lim))
			var ar record
			require.NoError(t, agg.Submit(0, req, Release))
			drive(t, agg, &ar, 0)
			ac, ok := ar.completion(1)
			require.True(t, ok)

			dec := newWorker(t, decodeArgs(64, lim))
			var dr record
			require.NoError(t, dec.Reserve(0, req))
			now := drive(t, dec, &dr, 0)
			require.True(t, dec.Activate(now+1, 1))
			drive(t, dec, &dr, now+1)
			dc, ok := dr.completion(1)
			require.True(t, ok)

			assert.Equal(t, ac.OutputTokens, dc.OutputTokens)
			assert.Len(t, dr.tokens, dc.OutputTokens-1, "the decode side streams all but the prefill's token")
			assert.Equal(t, limit-prompt, dc.OutputTokens)
			assert.True(t, dc.Truncated)
			assert.Zero(t, dec.Metrics().ActiveBlocks)
		})
	}
}

// TestHandoff_RejectedDestinationClosesWait: a destination refused by
// admission gets its Rejection and an EventDestinationCancelled, so every
// decode_kv_wait_start has a closing event.
func TestHandoff_RejectedDestinationClosesWait(t *testing.T) {
	w := newWorker(t, decodeArgs(64, func(a *Args) { a.MaxModelLen = intp(8) }))
	var r record
	require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 2}))
	drive(t, w, &r, 0)
	require.Len(t, r.rejections, 1)
	assert.Equal(t, RejectTooLong, r.rejections[0].Code)
	end := r.eventsFor(EventDestinationCancelled, 1)
	require.Len(t, end, 1)
	assert.Equal(t, r.rejections[0].At, end[0].At)
	assert.Zero(t, w.Metrics().ReservedRequests)
}

// TestHandoff_ReleaseHeldNeedsAnOutcome: a release must say how the hold
// ended; anything but Transferred or Aborted is refused and the hold stays.
func TestHandoff_ReleaseHeldNeedsAnOutcome(t *testing.T) {
	w := newWorker(t, prefillArgs(16))
	var r record
	held := holdOne(t, w, &r, 0, 1, seqTokens(1, 9))
	assert.False(t, w.ReleaseHeld(held+1, 1, 0))
	assert.False(t, w.ReleaseHeld(held+1, 1, Outcome(99)))
	assert.Equal(t, 1, w.Metrics().HeldRequests)
	assert.True(t, w.ReleaseHeld(held+2, 1, Transferred))
	drive(t, w, &r, held+2)
	end := r.eventsFor(EventHoldReleased, 1)
	require.Len(t, end, 1)
	assert.Equal(t, Transferred, end[0].Outcome)
}
