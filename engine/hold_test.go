package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func prefillArgs(n int, mod ...func(*Args)) Args {
	return smallArgs(n, append([]func(*Args){func(a *Args) { a.WorkerType = WorkerPrefill }}, mod...)...)
}

func TestHold_StrandingFillsPool(t *testing.T) {
	w := newWorker(t, prefillArgs(8))
	var r record
	// Two held 16-token prefills fill all 8 blocks (4 each, the first
	// token's slot is never allocated on a prefill worker).
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 16), MaxTokens: 1}, Hold))
	now := drive(t, w, &r, 0)
	require.Len(t, r.eventsOf(EventHoldStarted), 2)
	m := w.Metrics()
	assert.Equal(t, 8, m.ActiveBlocks, "capacity view counts held blocks")
	assert.Equal(t, 8, m.HeldBlocks)
	assert.Equal(t, 0, m.RouterActiveBlocks, "router view leaves held blocks out")
	assert.Equal(t, 2, m.HeldRequests)
	assert.Equal(t, 0, m.Running)

	// The next prefill waits: nothing is runnable, and the worker sleeps
	// until the earliest hold's session deadline, not a moment sooner.
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(300, 8), MaxTokens: 1}, Hold))
	passes := w.Passes()
	now = drive(t, w, &r, now)
	wake, ok := w.NextWake()
	require.True(t, ok)
	holdAt := r.eventsOf(EventHoldStarted)[0].At
	assert.Equal(t, holdAt+float64(DefaultHandoffSessionTimeoutMs), wake, "a worker stuck behind held KV sleeps until a deadline")
	assert.Equal(t, passes, w.Passes())
	assert.Equal(t, 1, w.Metrics().Waiting)
	// One that could never fit queues behind it: the head blocks the line.
	require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: seqTokens(400, 40), MaxTokens: 1}, Hold))
	now = drive(t, w, &r, now)
	assert.Equal(t, 2, w.Metrics().Waiting)
	assert.Empty(t, r.rejections)

	// Releasing one hold lets the waiting prefill run, and the request that
	// can never fit reaches the head and is rejected.
	require.True(t, w.ReleaseHeld(now+10, 1, Transferred))
	now = drive(t, w, &r, now+10)
	_, done := r.completion(3)
	assert.True(t, done)
	require.Len(t, r.rejections, 1)
	assert.Equal(t, uint64(4), r.rejections[0].RequestID)
	assert.Equal(t, RejectNeverFits, r.rejections[0].Code)
	require.True(t, w.ReleaseHeld(now+1, 2, Aborted))
	require.True(t, w.ReleaseHeld(now+2, 3, Transferred))
	drive(t, w, &r, now+2)
	m = w.Metrics()
	assert.Zero(t, m.ActiveBlocks)
	assert.Zero(t, m.HeldBlocks)
	assert.Zero(t, m.HeldRequests)
	assert.Len(t, r.eventsOf(EventHoldReleased), 3)
}

func TestWorker_SubmitErrors(t *testing.T) {
	w := newWorker(t, smallArgs(8))
	require.Error(t, w.Submit(0, Request{ID: 1}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: []uint32{1}}, Release))
	err := w.Submit(0, Request{ID: 1, Tokens: []uint32{1}}, Release)
	require.ErrorContains(t, err, "request 1")
}

// TestWorker_BlockAndRequestConservation runs random schedules of arrivals
// (shared prefixes, both policies, both worker types), holds, releases and
// cancellations, and checks after every pass that active + inactive + free
// == total, and at the end that every request is accounted for exactly once
// and the pool drains.
func TestWorker_BlockAndRequestConservation(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		wt := rapid.SampledFrom([]WorkerType{WorkerAggregated, WorkerPrefill}).Draw(rt, "worker_type")
		args := smallArgs(rapid.IntRange(4, 40).Draw(rt, "blocks"), func(a *Args) {
			a.WorkerType = wt
			a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
			a.MaxNumBatchedTokens = intp(rapid.IntRange(8, 64).Draw(rt, "budget"))
			a.MaxNumSeqs = intp(rapid.IntRange(1, 8).Draw(rt, "seqs"))
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preempt")
		})
		w, err := New(args, nil, 3)
		if err != nil {
			rt.Fatal(err)
		}
		var r record
		submitted := map[uint64]CompletionPolicy{}
		now := 0.0
		nextID := uint64(0)
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				prefix := seqTokens(uint32(1000*rapid.IntRange(0, 2).Draw(rt, "prefix")), rapid.IntRange(0, 12).Draw(rt, "plen"))
				tail := seqTokens(uint32(100000+int(nextID)*100), rapid.IntRange(1, 20).Draw(rt, "tlen"))
				pol := rapid.SampledFrom([]CompletionPolicy{Release, Hold}).Draw(rt, "policy")
				req := Request{ID: nextID, Tokens: append(prefix, tail...), MaxTokens: rapid.IntRange(1, 8).Draw(rt, "max")}
				if err := w.Submit(now, req, pol); err != nil {
					rt.Fatal(err)
				}
				submitted[nextID] = pol
				nextID++
			case 2:
				if nextID > 0 {
					w.ReleaseHeld(now, uint64(rapid.IntRange(0, int(nextID)-1).Draw(rt, "release")), Transferred)
				}
			case 3:
				if nextID > 0 {
					w.Cancel(now, uint64(rapid.IntRange(0, int(nextID)-1).Draw(rt, "cancel")))
				}
			default:
				if at, ok := w.NextWake(); ok {
					now = max(now, at)
					if out := w.Step(now); out != nil {
						r.add(out)
						now = out.End
					}
				}
			}
			checkWorker(rt, w)
		}
		// Drain: release every hold as it appears until the worker parks
		// with nothing held.
		for range 1000 {
			now = drive(rt, w, &r, now)
			held := 0
			for id := range submitted {
				if w.ReleaseHeld(now, id, Aborted) {
					held++
				}
			}
			if held == 0 && !w.Scheduler().HasWork() {
				// A deadline the releases fired may have left an event to
				// flush.
				drive(rt, w, &r, now)
				break
			}
		}
		if w.Scheduler().HasWork() {
			// Only possible when something waits forever: a conservation
			// failure in itself.
			rt.Fatalf("worker did not drain: %+v", w.Metrics())
		}

		ended := map[uint64]string{}
		mark := func(id uint64, how string) {
			if prev, dup := ended[id]; dup {
				rt.Fatalf("request %d ended twice: %s then %s", id, prev, how)
			}
			ended[id] = how
		}
		for _, c := range r.completions {
			mark(c.RequestID, "completed")
			if c.Held != (submitted[c.RequestID] == Hold) {
				rt.Fatalf("request %d: held=%v under policy %s", c.RequestID, c.Held, submitted[c.RequestID])
			}
		}
		for _, rj := range r.rejections {
			mark(rj.RequestID, "rejected")
		}
		for _, e := range r.eventsOf(EventCancelled) {
			mark(e.RequestID, "cancelled")
		}
		if len(ended) != len(submitted) {
			rt.Fatalf("submitted %d, ended %d", len(submitted), len(ended))
		}
		if s, e := len(r.eventsOf(EventHoldStarted)), len(r.eventsOf(EventHoldReleased)); s != e {
			rt.Fatalf("holds started %d, released %d", s, e)
		}
		m := w.Metrics()
		if m.ActiveBlocks != 0 || m.HeldBlocks != 0 || m.HeldRequests != 0 {
			rt.Fatalf("after drain: %+v", m)
		}
	})
}
