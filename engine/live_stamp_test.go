package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitModeled blocks until l's modeled clock has passed t.
func waitModeled(l *Live, t float64) {
	for l.Now() <= t {
		time.Sleep(200 * time.Microsecond)
	}
}

// TestLive_DeadlineGrace: a claim stamped before a hold's abort deadline
// that reaches the worker after the deadline's wall time, but within the
// grace, wins; one stamped after the deadline loses, and the abort keeps
// its exact modeled time.
func TestLive_DeadlineGrace(t *testing.T) {
	const abort = 100 // modeled ms: 0.1 ms of wall time at speedup 1000
	cases := []struct {
		name    string
		claimAt float64 // after the hold's start
		grace   time.Duration
		wins    bool
	}{
		// A long grace, so the claim is sure to arrive within it however
		// loaded the machine; the test does not wait for it.
		{"stamped before the deadline wins", abort - 1, 10 * time.Second, true},
		// The losing claim waits for the grace to end, so keep it short.
		{"stamped after the deadline loses", abort + 1, 100 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, prefillArgs(32, withAbort(abort), withTransfer(0.5)))
			on, ch := liveOutputs()
			l := StartLive(w, LiveOptions{SpeedupRatio: 1000, DeadlineGrace: tc.grace, OnOutput: on})
			defer l.Stop()

			require.NoError(t, l.Submit(Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Hold))
			hold := eventOf(waitFor(t, ch, "hold start", hasEvent(EventHoldStarted)), EventHoldStarted)
			// Well past the deadline's wall time: without the grace the
			// abort would have fired.
			waitModeled(l, hold.At+abort+500)

			_, ok := l.StartTransferAt(hold.At+tc.claimAt, 1, 20)
			assert.Equal(t, tc.wins, ok)
			end := eventOf(waitFor(t, ch, "hold end", hasEvent(EventHoldReleased)), EventHoldReleased)
			if tc.wins {
				assert.Equal(t, Transferred, end.Outcome)
				assert.InDelta(t, hold.At+tc.claimAt+10, end.At, 1e-9, "released when the transfer from the claim's time ends")
				assert.InDelta(t, tc.claimAt+10, end.DurationMs, 1e-9)
				return
			}
			assert.Equal(t, EndAbortTimeout, end.Reason)
			assert.Equal(t, hold.At+abort, end.At, "the abort keeps its modeled time")
			assert.Zero(t, l.Metrics().TransferringRequests)
		})
	}
}

// TestLive_GraceHoldsLaterPasses: a pass that would start after a
// contested deadline waits for it, so the deadline's event precedes the
// pass, and the grace costs no spinning.
func TestLive_GraceHoldsLaterPasses(t *testing.T) {
	const abort = 50
	w := newWorker(t, prefillArgs(64, withAbort(abort)))
	on, ch := liveOutputs()
	l := StartLive(w, LiveOptions{SpeedupRatio: 1000, DeadlineGrace: 100 * time.Millisecond, OnOutput: on})
	defer l.Stop()

	require.NoError(t, l.Submit(Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Hold))
	hold := eventOf(waitFor(t, ch, "hold start", hasEvent(EventHoldStarted)), EventHoldStarted)
	wakes := l.Wakeups()
	// Stamped past the deadline: it must wait for the grace, and then come
	// after the abort.
	require.NoError(t, l.SubmitAt(hold.At+abort+1, Request{ID: 2, Tokens: seqTokens(100, 20), MaxTokens: 1}, Release))
	var abortAt float64
	sawAbort := false
	for !sawAbort {
		o := waitFor(t, ch, "output", func(Output) bool { return true })
		for _, e := range o.Events {
			if e.Kind == EventHoldReleased {
				sawAbort, abortAt = true, e.At
			}
		}
		if !sawAbort {
			assert.False(t, o.Ran, "no pass ran before the abort")
		}
	}
	assert.Equal(t, hold.At+abort, abortAt)
	done := waitFor(t, ch, "completion", func(o Output) bool { return len(o.Completions) > 0 })
	assert.Equal(t, hold.At+abort+1, done.Completions[0].Arrival, "the request kept its stamped arrival")
	assert.LessOrEqual(t, l.Wakeups()-wakes, uint64(6), "the worker slept through the grace")
}

// TestLive_StampedInputs: an input stamped by its caller is applied at its
// own modeled time, in the past or ahead of the wall clock, but never
// before what the worker already did.
func TestLive_StampedInputs(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	on, ch := liveOutputs()
	l := StartLive(w, LiveOptions{SpeedupRatio: 100, OnOutput: on})
	defer l.Stop()

	// Ahead of the wall clock: the worker's timeline moves there.
	ahead := l.Now() + 200
	require.NoError(t, l.SubmitAt(ahead, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 2}, Release))
	c1 := waitFor(t, ch, "completion 1", func(o Output) bool { return len(o.Completions) > 0 }).Completions[0]
	assert.Equal(t, ahead, c1.Arrival)

	// Behind the wall clock but after everything the worker did: applied
	// at its time, not the wall's.
	waitModeled(l, c1.At+300)
	past := c1.At + 100
	require.NoError(t, l.SubmitAt(past, Request{ID: 2, Tokens: seqTokens(50, 12), MaxTokens: 2}, Release))
	c2 := waitFor(t, ch, "completion 2", func(o Output) bool { return len(o.Completions) > 0 }).Completions[0]
	assert.Equal(t, past, c2.Arrival)

	// Before what the worker already did: applied at its latest time.
	require.NoError(t, l.SubmitAt(ahead-50, Request{ID: 3, Tokens: seqTokens(90, 12), MaxTokens: 2}, Release))
	c3 := waitFor(t, ch, "completion 3", func(o Output) bool { return len(o.Completions) > 0 }).Completions[0]
	assert.GreaterOrEqual(t, c3.Arrival, c2.At, "never before the worker's own past")
}
