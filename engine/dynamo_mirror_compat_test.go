package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mirrors of Dynamo's mocker unit tests where mocker's default differs
// from Dynamo main and dynamo_compat gives Dynamo's figure: each asserts
// both, the default first (docs/fidelity.md lists the differences).

// eachCompat runs f as two subtests, mocker's default and dynamo_compat,
// on a worker built from base with the switch set and its budget of
// batched tokens and running slots.
func eachCompat(t *testing.T, base func(int, ...func(*Args)) Args, blocks, budget, seqs int, f func(t *testing.T, compat bool, w *Worker)) {
	for _, compat := range []bool{false, true} {
		name := "default"
		if compat {
			name = "dynamo_compat"
		}
		t.Run(name, func(t *testing.T) {
			f(t, compat, newWorker(t, base(blocks, func(a *Args) {
				a.MaxNumBatchedTokens = intp(budget)
				a.MaxNumSeqs = intp(seqs)
				a.DynamoCompat = compat
			})))
		})
	}
}

// byCompat picks the figure expected under dynamo_compat or by default.
func byCompat(compat bool, mocker, dynamo int) int {
	if compat {
		return dynamo
	}
	return mocker
}

// TestDynamo_DestinationLifecycleCountedOnceAsWaiting mirrors Dynamo's
// destination_lifecycle_is_counted_once_as_queued_decode (vLLM
// destination lifecycle tests) on a decode worker of 6 blocks of 4,
// max_num_batched_tokens 32, max_num_seqs 1: a 4-token destination
// reserves at once, a 24-token one (6 blocks, 5 free) stays pending and is
// cancelled, a blocker takes the slot, the reserved one is activated and
// runs after it. Dynamo's waiting_requests reads 1, 2, 1, then 1 (the
// activated request waits for the slot) and 0 at the end; mocker's
// Waiting leaves the reservation out by default (0, 1, 0, 1, 0), and
// reports Dynamo's figure under dynamo_compat. DynamoWaiting is Dynamo's
// figure in both. Dynamo's forward-pass queue counts have no counterpart.
// The held destination asks for 2 tokens here where Dynamo's asks for 1:
// mocker counts the prefill side's token in MaxTokens, so both decode one
// token on the destination (with 1, mocker's completes on activation).
func TestDynamo_DestinationLifecycleCountedOnceAsWaiting(t *testing.T) {
	eachCompat(t, decodeArgs, 6, 32, 1, func(t *testing.T, compat bool, w *Worker) {
		var r record
		waiting := func(mocker, dynamo int, msg string) {
			t.Helper()
			m := w.Metrics()
			assert.Equal(t, byCompat(compat, mocker, dynamo), m.Waiting, "Waiting: %s", msg)
			assert.Equal(t, dynamo, m.DynamoWaiting, "DynamoWaiting: %s", msg)
		}

		const held, pending, blocker = 32002, 32004, 32005
		require.NoError(t, w.Reserve(0, Request{ID: held, Tokens: repeatToken(1, 4), MaxTokens: 2}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, held), 1, "reserved at once")
		waiting(0, 1, "after the reservation")

		require.NoError(t, w.Reserve(now, Request{ID: pending, Tokens: repeatToken(2, 24), MaxTokens: 1}))
		now = drive(t, w, &r, now)
		assert.Empty(t, r.eventsFor(EventDecodeReserved, pending), "6 blocks needed, 5 free")
		waiting(1, 2, "with a pending destination")

		require.True(t, w.CancelDestination(now, pending))
		waiting(0, 1, "after the pending one is cancelled")

		require.NoError(t, w.Submit(now, Request{ID: blocker, Tokens: repeatToken(3, 4), MaxTokens: 2}, Release))
		out := step(t, w, &r, now)
		require.Equal(t, 1, w.Metrics().Running)
		require.True(t, w.Activate(out.Start, held))
		waiting(1, 1, "the activated request waits for the slot")

		driveAll(t, w, &r, out.End)
		_, ok := r.completion(held)
		require.True(t, ok)
		waiting(0, 0, "after completion")
		assert.Equal(t, 0, w.Metrics().ActiveBlocks)
	})
}

// repeatToken returns n copies of token, as Dynamo's tests write vec![token; n].
func repeatToken(token uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = token
	}
	return out
}

// TestFidelity_SGLangWaitingCountsReservations: the same rule on an SGLang
// decode worker, whose destinations reserve in its passes: two reserved
// destinations are waiting under dynamo_compat, and in ReservedRequests
// only by default.
func TestFidelity_SGLangWaitingCountsReservations(t *testing.T) {
	for _, compat := range []bool{false, true} {
		w := newWorker(t, sglangArgs(64, func(a *Args) {
			a.WorkerType = WorkerDecode
			a.DynamoCompat = compat
		}))
		var r record
		require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(100, 8), MaxTokens: 3}))
		require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(200, 8), MaxTokens: 3}))
		drive(t, w, &r, 0)
		m := w.Metrics()
		require.Equal(t, 2, m.ReservedRequests)
		assert.Equal(t, byCompat(compat, 0, 2), m.Waiting, "dynamo_compat %v", compat)
		assert.Equal(t, 2, m.DynamoWaiting)
	}
}

// TestDynamo_TerminalCompletionHoldsSourceWithoutFreeingKV mirrors Dynamo's
// terminal_completion_holds_source_without_freeing_kv (vLLM source hold
// tests): a prefill worker of 8 blocks of 4, max_num_batched_tokens 8,
// max_num_seqs 1, prefix caching off, takes an 8-token prompt with
// max_tokens 2 under the Hold policy. Dynamo's core generates both tokens:
// the first pass prefills (2 blocks) without completing, the second
// allocates the block the first token needs, completes and holds all 3
// blocks; releasing the hold frees them, and a second release changes
// nothing. mocker stops a prefill worker's request at its first token by
// default, so the first pass completes and holds the prompt's 2 blocks;
// dynamo_compat generates MaxTokens there as Dynamo's core does.
func TestDynamo_TerminalCompletionHoldsSourceWithoutFreeingKV(t *testing.T) {
	noCaching := func(n int, mod ...func(*Args)) Args {
		return prefillArgs(n, append(mod, func(a *Args) { a.EnablePrefixCaching = false })...)
	}
	eachCompat(t, noCaching, 8, 8, 1, func(t *testing.T, compat bool, w *Worker) {
		var r record
		const id = 101
		require.NoError(t, w.Submit(0, Request{ID: id, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))

		first := step(t, w, &r, 0)
		_, done := r.completion(id)
		assert.Equal(t, !compat, done, "the first pass completes only by default")
		activeAfterFirst := w.Metrics().ActiveBlocks
		assert.Equal(t, 2, activeAfterFirst, "the prompt's blocks")

		if compat {
			step(t, w, &r, first.End)
			_, done = r.completion(id)
			assert.True(t, done, "the second pass completes")
		}
		assert.Len(t, r.eventsFor(EventHoldStarted, id), 1)
		m := w.Metrics()
		assert.Equal(t, byCompat(compat, 2, 3), m.ActiveBlocks, "held blocks")
		assert.Equal(t, byCompat(compat, 2, 3), m.HeldBlocks)
		assert.Equal(t, byCompat(compat, 1, 2), len(r.tokens), "tokens produced")
		assert.Equal(t, 1, m.HeldRequests)

		require.True(t, w.ReleaseHeld(first.End+10, id, Transferred))
		assert.Equal(t, 0, w.Metrics().ActiveBlocks)
		assert.False(t, w.ReleaseHeld(first.End+11, id, Transferred), "released once")
		assert.Equal(t, 0, w.Metrics().ActiveBlocks)
		assert.Equal(t, 0, w.Metrics().HeldRequests)
	})
}
