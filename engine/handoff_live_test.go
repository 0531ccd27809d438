package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hasEvent(k EventKind) func(Output) bool {
	return func(o Output) bool {
		for _, e := range o.Events {
			if e.Kind == k {
				return true
			}
		}
		return false
	}
}

func eventOf(o Output, k EventKind) Event {
	for _, e := range o.Events {
		if e.Kind == k {
			return e
		}
	}
	return Event{}
}

func TestLive_AbortFiresWithoutSpinning(t *testing.T) {
	const abort = 300 // modeled ms: 30 ms of wall time at speedup 10
	w := newWorker(t, prefillArgs(32, withAbort(abort)))
	on, ch := liveOutputs()
	l := StartLive(w, LiveOptions{SpeedupRatio: 10, OnOutput: on})
	defer l.Stop()

	require.NoError(t, l.Submit(Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Hold))
	start := eventOf(waitFor(t, ch, "hold start", hasEvent(EventHoldStarted)), EventHoldStarted)
	passes, wakes := l.Passes(), l.Wakeups()

	end := eventOf(waitFor(t, ch, "abort", hasEvent(EventHoldReleased)), EventHoldReleased)
	assert.Equal(t, EndAbortTimeout, end.Reason)
	assert.Equal(t, start.At+abort, end.At, "the abort is stamped at its modeled deadline")
	assert.GreaterOrEqual(t, l.Now(), end.At, "and fires no earlier than deadline/speedup of wall time")
	assert.Equal(t, passes, l.Passes(), "no pass ran while only held KV remained")
	assert.LessOrEqual(t, l.Wakeups()-wakes, uint64(2), "the worker slept until the deadline instead of spinning")

	// Nothing left, no deadline: the worker parks.
	parked := l.Wakeups()
	for range 3 {
		time.Sleep(15 * time.Millisecond)
		assert.Equal(t, parked, l.Wakeups())
	}
	assert.Zero(t, l.Metrics().ActiveBlocks)
}

func TestLive_Handoff(t *testing.T) {
	start := time.Now()
	pOn, pch := liveOutputs()
	dOn, dch := liveOutputs()
	pre := StartLive(newWorker(t, prefillArgs(32, withTransfer(0.5))), LiveOptions{SpeedupRatio: 100, Start: start, OnOutput: pOn})
	dec := StartLive(newWorker(t, decodeArgs(32)), LiveOptions{SpeedupRatio: 100, Start: start, OnOutput: dOn})
	defer pre.Stop()
	defer dec.Stop()

	req := Request{ID: 9, Tokens: seqTokens(1, 10), MaxTokens: 4}
	require.NoError(t, pre.Submit(req, Hold))
	waitFor(t, pch, "hold start", hasEvent(EventHoldStarted))
	require.NoError(t, dec.Reserve(req))
	res := eventOf(waitFor(t, dch, "reservation", hasEvent(EventDecodeReserved)), EventDecodeReserved)
	// A transfer moves whole blocks: 10 tokens at block_size 4 are 3
	// blocks, 12 tokens.
	assert.Equal(t, 12, res.MissingTokens)

	delay, ok := pre.StartTransfer(req.ID, TransferTokens(TransferFullPrompt, len(req.Tokens), res.MissingTokens))
	require.True(t, ok)
	assert.InDelta(t, 5, delay, 1e-9)
	end := eventOf(waitFor(t, pch, "release", hasEvent(EventHoldReleased)), EventHoldReleased)
	assert.Equal(t, Transferred, end.Outcome)

	require.True(t, dec.Activate(req.ID))
	assert.False(t, dec.Activate(req.ID), "activation happens once")
	done := waitFor(t, dch, "completion", func(o Output) bool { return len(o.Completions) > 0 })
	assert.Equal(t, 4, done.Completions[0].OutputTokens)
	m := dec.Metrics()
	assert.Zero(t, m.ReservedRequests)
	assert.Zero(t, m.ActiveBlocks)

	dec.Stop()
	assert.ErrorIs(t, dec.Reserve(Request{ID: 10, Tokens: []uint32{1}}), ErrStopped)
	assert.False(t, dec.CancelDestination(10))
	pre.Stop()
	_, ok = pre.StartTransfer(9, 1)
	assert.False(t, ok)
}

func TestLive_DestinationFirstHandoff(t *testing.T) {
	start := time.Now()
	pOn, pch := liveOutputs()
	dOn, dch := liveOutputs()
	pre := StartLive(newWorker(t, sglangArgs(32, asPrefill, withTransfer(0.5))), LiveOptions{SpeedupRatio: 100, Start: start, OnOutput: pOn})
	dec := StartLive(newWorker(t, sglangArgs(32, func(a *Args) { a.WorkerType = WorkerDecode })), LiveOptions{SpeedupRatio: 100, Start: start, OnOutput: dOn})
	defer pre.Stop()
	defer dec.Stop()

	req := Request{ID: 3, Tokens: seqTokens(1, 10), MaxTokens: 4}
	require.NoError(t, dec.Reserve(req))
	res := eventOf(waitFor(t, dch, "reservation", hasEvent(EventDecodeReserved)), EventDecodeReserved)
	require.NoError(t, pre.Submit(req, Hold))
	assert.Zero(t, pre.Passes(), "a destination-first prefill waits for DestinationReady")
	require.True(t, pre.DestinationReady(req.ID, TransferTokens(TransferFullPrompt, len(req.Tokens), res.MissingTokens)))
	assert.False(t, pre.DestinationReady(req.ID, 10), "ready once")

	held := waitFor(t, pch, "hold start", hasEvent(EventHoldStarted))
	hold, xfer := eventOf(held, EventHoldStarted), eventOf(held, EventTransferStart)
	require.Equal(t, EventTransferStart, xfer.Kind, "the transfer starts in the output that starts the hold")
	assert.Equal(t, hold.At, xfer.At)
	assert.InDelta(t, 5, xfer.DelayMs, 1e-9)
	_, ok := pre.StartTransfer(req.ID, 10)
	assert.False(t, ok, "the transfer is already under way")

	end := eventOf(waitFor(t, pch, "release", hasEvent(EventHoldReleased)), EventHoldReleased)
	assert.Equal(t, Transferred, end.Outcome)
	assert.InDelta(t, xfer.DelayMs, end.DurationMs, 1e-9, "the hold lasts the transfer and no longer")
	require.True(t, dec.Activate(req.ID))
	done := waitFor(t, dch, "completion", func(o Output) bool { return len(o.Completions) > 0 })
	assert.Equal(t, 4, done.Completions[0].OutputTokens)

	pre.Stop()
	assert.False(t, pre.DestinationReady(req.ID, 1), "stopped")
}
