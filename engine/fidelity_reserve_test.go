package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Golden tests for the destination rules mocker shares with Dynamo
// (docs/fidelity.md, "Reservations"): a reservation takes KV only, is tried
// on every change that frees KV, pauses fresh admissions while it waits,
// and an activated request then queues for a running slot.

// TestFidelity_ReservationTakesNoSlot: with max_num_seqs 1, a destination
// reserved while the slot is free does not keep it: the request queued
// before it is admitted and runs while the reservation waits for Activate.
// mocker's former rule (reserve_takes_slot) reserved only once that
// request had completed.
func TestFidelity_ReservationTakesNoSlot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		takesSlot  bool
		reservedAt func(running Completion) float64
	}{
		// Dynamo: reserved the moment it arrives (t = 0).
		{"dynamo rule (default)", false, func(Completion) float64 { return 0 }},
		// reserve_takes_slot: only when the running request completes.
		{"reserve_takes_slot", true, func(c Completion) float64 { return c.At }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, smallArgs(64, func(a *Args) {
				a.MaxNumSeqs = intp(1)
				a.ReserveTakesSlot = tc.takesSlot
			}))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 8), MaxTokens: 4}, Release))
			require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(200, 8), MaxTokens: 2}))
			drive(t, w, &r, 0)
			c1, ok := r.completion(1)
			require.True(t, ok)
			res := r.eventsFor(EventDecodeReserved, 2)
			require.Len(t, res, 1)
			assert.Equal(t, tc.reservedAt(c1), res[0].At)
		})
	}
}

// TestFidelity_ReserveOnCapacityChange: a destination waiting for blocks is
// reserved at the instant a hold's release frees them, not at the next pass,
// and fresh requests wait behind it.
func TestFidelity_ReserveOnCapacityChange(t *testing.T) {
	w := newWorker(t, smallArgs(8))
	var r record
	// Two held 16-token requests fill all 8 blocks of 4.
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 16), MaxTokens: 1}, Hold))
	now := drive(t, w, &r, 0)
	require.Equal(t, 8, w.Metrics().ActiveBlocks)

	// The destination needs 2 blocks; a fresh request needing 1 arrives
	// after it and must not take them first.
	require.NoError(t, w.Reserve(now, Request{ID: 3, Tokens: seqTokens(300, 8), MaxTokens: 2}))
	require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: seqTokens(400, 3), MaxTokens: 1}, Release))
	now = drive(t, w, &r, now)
	assert.Empty(t, r.eventsFor(EventDecodeReserved, 3))
	_, done := r.completion(4)
	assert.False(t, done, "fresh admissions pause while a destination waits")
	m := w.Metrics()
	assert.Equal(t, 2, m.Waiting, "the pending destination and the paused request")
	assert.Equal(t, 2, m.DynamoWaiting)

	release := now + 7
	require.True(t, w.ReleaseHeld(release, 1, Aborted))
	drive(t, w, &r, release)
	res := r.eventsFor(EventDecodeReserved, 3)
	require.Len(t, res, 1)
	assert.Equal(t, release, res[0].At, "reserved when the release freed the blocks")
	assert.Equal(t, 8, res[0].MissingTokens, "2 whole blocks of 4")
	c4, ok := r.completion(4)
	require.True(t, ok, "the fresh request runs once nothing waits for blocks")
	assert.GreaterOrEqual(t, c4.At, release)
	m = w.Metrics()
	assert.Equal(t, 0, m.Waiting)
	assert.Equal(t, 1, m.ReservedRequests)
	assert.Equal(t, 1, m.DynamoWaiting, "Dynamo's waiting_requests counts the reservation")
}

// TestFidelity_DestinationMissingIsBlockRounded: Dynamo's
// destination_missing charges whole blocks. A 10-token prompt with nothing
// resident at block_size 4 is ceil(10/4) = 3 blocks = 12 tokens; at 2 ms
// per token the transfer takes 24 ms, not 20.
func TestFidelity_DestinationMissingIsBlockRounded(t *testing.T) {
	dec := newWorker(t, decodeArgs(16))
	var dr record
	prompt := seqTokens(1, 10)
	require.NoError(t, dec.Reserve(0, Request{ID: 1, Tokens: prompt, MaxTokens: 2}))
	drive(t, dec, &dr, 0)
	res := dr.eventsFor(EventDecodeReserved, 1)
	require.Len(t, res, 1)
	assert.Equal(t, 12, res[0].MissingTokens)

	pre := newWorker(t, prefillArgs(16, withTransfer(2), func(a *Args) { a.KVTransferTimingMode = TransferDestinationMissing }))
	var pr record
	held := holdOne(t, pre, &pr, 0, 1, prompt)
	delay, ok := pre.StartTransfer(held, 1, TransferTokens(TransferDestinationMissing, len(prompt), res[0].MissingTokens))
	require.True(t, ok)
	assert.InDelta(t, 24, delay, 1e-9)
}

// TestFidelity_SGLangReservationTakesNoSlot: SGLang destinations reserve
// pages only; an activated one waits for the running slot.
func TestFidelity_SGLangReservationTakesNoSlot(t *testing.T) {
	w := newWorker(t, sglangArgs(64, func(a *Args) {
		a.WorkerType = WorkerDecode
		a.MaxNumSeqs = intp(1)
	}))
	var r record
	require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(100, 8), MaxTokens: 3}))
	require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(200, 8), MaxTokens: 3}))
	now := driveAll(t, w, &r, 0)
	assert.Equal(t, 2, w.Metrics().ReservedRequests, "both reserve though max_num_seqs is 1")
	require.True(t, w.Activate(now, 1))
	require.True(t, w.Activate(now, 2))
	assert.Equal(t, 2, w.Metrics().Waiting, "activated, they wait for the slot")
	driveAll(t, w, &r, now)
	c1, ok := r.completion(1)
	require.True(t, ok)
	c2, ok := r.completion(2)
	require.True(t, ok)
	assert.Greater(t, c2.At, c1.At, "one at a time")
}
