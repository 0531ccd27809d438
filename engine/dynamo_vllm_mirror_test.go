package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mirrors of more of Dynamo's vLLM mocker unit tests (lib/mocker's
// scheduler/vllm tests: source holds, destination lifecycle, core
// behaviour, router events, the live scheduler's load patterns and the
// forward-pass figures an Output carries), run under mocker's default and
// under dynamo_compat; where the two differ the default's figure is
// asserted beside Dynamo's.

// dynamoVLLMArgs is an aggregated vLLM worker of blocks blocks of 4 with
// Dynamo's test settings: a budget of batched tokens, a cap of running
// sequences, chunked prefill on, and prefix caching as given.
func dynamoVLLMArgs(blocks, budget, seqs int, caching bool, mod ...func(*Args)) Args {
	return smallArgs(blocks, append([]func(*Args){func(a *Args) {
		a.MaxNumBatchedTokens = intp(budget)
		a.MaxNumSeqs = intp(seqs)
		a.EnableChunkedPrefill = true
		a.EnablePrefixCaching = caching
	}}, mod...)...)
}

// eachVLLMCompat runs f under mocker's default and under dynamo_compat.
func eachVLLMCompat(t *testing.T, args Args, f func(t *testing.T, compat bool, w *Worker)) {
	for _, compat := range []bool{false, true} {
		name := "default"
		if compat {
			name = "dynamo_compat"
		}
		t.Run(name, func(t *testing.T) {
			a := args
			a.DynamoCompat = compat
			f(t, compat, newWorker(t, a))
		})
	}
}

// makeArgs is Dynamo's make_args: 6 blocks, a budget of 8, 3 sequences,
// no prefix caching.
func makeArgs() Args { return dynamoVLLMArgs(6, 8, 3, false) }

// routerArgs is Dynamo's router_args: 12 blocks, a budget of 12, 3
// sequences, prefix caching on.
func routerArgs() Args { return dynamoVLLMArgs(12, 12, 3, true) }

// --- source holds ---

func dynamoVLLMSourceArgs() Args {
	return dynamoVLLMArgs(8, 8, 1, false, func(a *Args) { a.WorkerType = WorkerPrefill })
}

// cancel_and_early_release_cleanup_exactly_once: a held source (after one
// pass by default, two in Dynamo and under dynamo_compat) is cancelled,
// freeing every block, and a second cancellation changes nothing. A source
// released before it ran is cancelled here; a request under the same id
// then runs to completion and holds nothing.
func TestDynamo_VLLMCancelAndEarlyReleaseCleanupExactlyOnce(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMSourceArgs(), func(t *testing.T, compat bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 102, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		first := step(t, w, &r, 0)
		now := first.End
		if compat {
			now = step(t, w, &r, now).End
		}
		require.Len(t, r.eventsFor(EventHoldStarted, 102), 1)
		held := w.Metrics().ActiveBlocks
		assert.Positive(t, held)
		require.True(t, w.Cancel(now, 102))
		assert.Zero(t, w.Metrics().ActiveBlocks)
		assert.False(t, w.Cancel(now, 102))
		assert.Zero(t, w.Metrics().ActiveBlocks)

		require.NoError(t, w.Submit(now, Request{ID: 103, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		require.True(t, w.Cancel(now, 103), "released before it ran")
		require.NoError(t, w.Submit(now, Request{ID: 103, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		driveAll(t, w, &r, now)
		_, done := r.completion(103)
		assert.True(t, done)
		assert.Zero(t, w.Metrics().HeldRequests)
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})
}

// active_request_id_is_rejected_before_source_hold_registration.
func TestDynamo_VLLMActiveRequestIDIsRejectedBeforeSourceHoldRegistration(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMSourceArgs(), func(t *testing.T, _ bool, w *Worker) {
		require.NoError(t, w.Submit(0, Request{ID: 104, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		assert.Error(t, w.Submit(0, Request{ID: 104, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		assert.Error(t, w.Submit(0, Request{ID: 104, Tokens: seqTokens(0, 8), MaxTokens: 2}, Hold))
		assert.Equal(t, 1, w.Metrics().Waiting)
		assert.Zero(t, w.Metrics().HeldRequests)
	})
}

// --- destination lifecycle ---

// materialized_prompt_above_max_model_len_is_rejected: a 9-token
// destination on a decode worker whose max_model_len is 8 is rejected, and
// the worker keeps nothing of it. Dynamo reserves and activates it and its
// first pass rejects it; mocker rejects it (too_long) when it would be
// reserved, so it is never reserved and there is nothing to activate.
func TestDynamo_VLLMMaterializedPromptAboveMaxModelLenIsRejected(t *testing.T) {
	args := decodeArgs(12, func(a *Args) {
		a.MaxModelLen = intp(8)
		a.MaxNumBatchedTokens = intp(16)
		a.MaxNumSeqs = intp(1)
	})
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		const id = 30002
		require.NoError(t, w.Reserve(0, Request{ID: id, Tokens: repeatToken(1, 9), MaxTokens: 1}))
		now := drive(t, w, &r, 0)
		assert.False(t, w.Activate(now, id), "never reserved")
		require.Len(t, r.rejections, 1)
		assert.Equal(t, uint64(id), r.rejections[0].RequestID)
		assert.Equal(t, RejectTooLong, r.rejections[0].Code)
		assert.Empty(t, r.eventsFor(EventDecodeReserved, id))
		assert.Len(t, r.eventsFor(EventDestinationCancelled, id), 1, "its wait is closed")
		assert.False(t, w.Scheduler().HasWork())
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})
}

// destination_cancel_reaches_activated_request_exactly_once: an activated
// destination that runs is cancelled once; the worker is left empty.
func TestDynamo_VLLMDestinationCancelReachesActivatedRequestExactlyOnce(t *testing.T) {
	eachVLLMCompat(t, dynamoDecodeArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		const id = 10101
		require.NoError(t, w.Reserve(0, Request{ID: id, Tokens: seqTokens(0, 8), MaxTokens: 4}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, id), 1)
		require.True(t, w.Activate(now, id))
		out := step(t, w, &r, now)
		assert.Equal(t, 1, w.Metrics().Running)
		require.True(t, w.Cancel(out.End, id))
		assert.False(t, w.Scheduler().HasWork())
		assert.Zero(t, w.Metrics().ActiveBlocks)
		assert.False(t, w.Cancel(out.End, id))
	})
}

// cancel_running_destination_immediately_retries_pending_head: with the
// one running slot taken by an activated destination, a second
// destination stays pending; cancelling the running one reserves the
// pending one at once, at the cancellation.
func TestDynamo_VLLMCancelRunningDestinationImmediatelyRetriesPendingHead(t *testing.T) {
	eachVLLMCompat(t, dynamoDecodeArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		const running, pending = 10203, 10204
		require.NoError(t, w.Reserve(0, Request{ID: running, Tokens: seqTokens(0, 4), MaxTokens: 8}))
		now := drive(t, w, &r, 0)
		require.Len(t, r.eventsFor(EventDecodeReserved, running), 1)
		require.True(t, w.Activate(now, running))
		out := step(t, w, &r, now)
		require.Equal(t, 1, w.Metrics().Running)

		require.NoError(t, w.Reserve(out.End, Request{ID: pending, Tokens: seqTokens(100, 4), MaxTokens: 2}))
		assert.Empty(t, r.eventsFor(EventDecodeReserved, pending), "no running slot")
		require.True(t, w.Cancel(out.End, running))
		drive(t, w, &r, out.End)
		res := r.eventsFor(EventDecodeReserved, pending)
		require.Len(t, res, 1)
		assert.Equal(t, out.End, res[0].At, "reserved at the cancellation")
		assert.True(t, w.CancelDestination(out.End, pending))
	})
}

// --- core behaviour ---

// test_unified_pass_keeps_partial_prefill_in_running: two 8-token prompts
// under a budget of 12: the first is prefilled whole and emits, the second
// gets 4 tokens and stays running; nothing waits; 3 blocks are in use.
func TestDynamo_VLLMUnifiedPassKeepsPartialPrefillInRunning(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(6, 12, 3, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 2}, Release))
		out := step(t, w, &r, 0)
		assert.Equal(t, []uint64{1}, tokenIDs(out), "the first request emits at once")
		m := w.Metrics()
		assert.Equal(t, 2, m.Running)
		assert.Zero(t, m.Waiting)
		v := sgVLLM(w)
		assert.Equal(t, 8, v.seq(1).computed)
		assert.Equal(t, 4, v.seq(2).computed)
		assert.Equal(t, 1, v.seq(1).out)
		assert.Equal(t, 3, m.ActiveBlocks)
	})
}

// test_running_requests_consume_budget_before_waiting: under a budget of
// 4, the running request catches up (and emits) before the waiting one
// gets any of the budget.
func TestDynamo_VLLMRunningRequestsConsumeBudgetBeforeWaiting(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(16, 4, 3, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 2}, Release))
		first := step(t, w, &r, 0)
		second := step(t, w, &r, first.End)
		assert.Contains(t, tokenIDs(second), uint64(1))
		assert.Zero(t, sgVLLM(w).seq(2).computed, "the waiting request gets no budget first")
	})
}

// test_execute_pass_batches_two_ready_requests_together: two 4-token
// prompts under a budget of 8 are admitted in the same pass and emit their
// first tokens at the same instant.
func TestDynamo_VLLMExecutePassBatchesTwoReadyRequestsTogether(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(16, 8, 4, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 101, Tokens: repeatToken(1, 4), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 202, Tokens: repeatToken(2, 4), MaxTokens: 1}, Release))
		out := step(t, w, &r, 0)
		require.Len(t, out.Tokens, 2)
		assert.Equal(t, out.Tokens[0].At, out.Tokens[1].At)
		c1, ok := r.completion(101)
		require.True(t, ok)
		c2, ok := r.completion(202)
		require.True(t, ok)
		assert.Equal(t, c1.FirstTokenAt, c2.FirstTokenAt)
	})
}

// test_prefill_completion_emits_handoff_delay: an 8-token prompt on a
// prefill worker at 1 GB/s and 1 MB per token transfers in 8 ms.
func TestDynamo_VLLMPrefillCompletionEmitsHandoffDelay(t *testing.T) {
	args := dynamoVLLMArgs(8, 8, 1, true, func(a *Args) {
		a.WorkerType = WorkerPrefill
		bw, bpt := 1.0, 1_000_000
		a.KVTransferBandwidth, a.KVBytesPerToken = &bw, &bpt
	})
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 81, Tokens: repeatToken(1, 8), MaxTokens: 1}, Hold))
		out := step(t, w, &r, 0)
		require.Len(t, out.Completions, 1)
		delay, ok := w.StartTransfer(out.End, 81, 8)
		require.True(t, ok)
		assert.InDelta(t, 8.0, delay, 1e-9)
	})
}

// test_first_token_can_arrive_on_prompt_completion_pass: an 8-token prompt
// for 2 tokens emits its first token, not completing, in the pass that
// completes its prompt.
func TestDynamo_VLLMFirstTokenCanArriveOnPromptCompletionPass(t *testing.T) {
	eachVLLMCompat(t, makeArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 11, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		out := step(t, w, &r, 0)
		assert.Equal(t, []uint64{11}, tokenIDs(out))
		assert.Empty(t, out.Completions)
		assert.Equal(t, 1, sgVLLM(w).seq(11).out)
	})
}

// test_preemption_requeues_newest_running_request: two 8-token prompts for
// 8 tokens on 6 blocks with LIFO preemption: the newer is preempted once,
// loses its computed tokens and goes to the front of the queue.
func TestDynamo_VLLMPreemptionRequeuesNewestRunningRequest(t *testing.T) {
	args := dynamoVLLMArgs(6, 16, 2, false, func(a *Args) { a.PreemptionMode = PreemptLIFO })
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 8}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 8}, Release))
		now := 0.0
		for i := 0; w.Metrics().Preemptions == 0; i++ {
			require.Less(t, i, 16, "nobody was preempted")
			now = step(t, w, &r, now).End
		}
		v := sgVLLM(w)
		s := v.seq(2)
		assert.Zero(t, s.computed)
		assert.Equal(t, int32(1), s.preempts)
		assert.Equal(t, s, v.waiting.front())
		assert.Equal(t, uint64(1), w.Metrics().Preemptions)
	})
}

// test_waiting_full_isl_gate_blocks_without_preemption_then_admits: on 6
// blocks, a 16-token holder runs; a 12-token request behind it cannot
// have its blocks and blocks the 4-token follower too (FIFO), with no
// preemption; once the holder completes the blocked one is admitted.
func TestDynamo_VLLMWaitingFullISLGateBlocksWithoutPreemptionThenAdmits(t *testing.T) {
	args := dynamoVLLMArgs(6, 16, 3, false, func(a *Args) { a.PreemptionMode = PreemptLIFO })
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		const holder, blocked, follower = 1, 2, 3
		require.NoError(t, w.Submit(0, Request{ID: holder, Tokens: seqTokens(0, 16), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: blocked, Tokens: seqTokens(100, 12), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: follower, Tokens: seqTokens(200, 4), MaxTokens: 1}, Release))
		pass1 := step(t, w, &r, 0)
		_, done := r.completion(holder)
		assert.True(t, done)
		assert.NotContains(t, tokenIDs(pass1), uint64(follower), "a smaller follower does not skip the blocked head")
		v := sgVLLM(w)
		assert.Equal(t, uint64(blocked), v.waiting.front().id)
		assert.Zero(t, v.seq(blocked).computed)
		assert.Zero(t, w.Metrics().Preemptions)

		pass2 := step(t, w, &r, pass1.End)
		assert.Contains(t, tokenIDs(pass2), uint64(blocked), "admitted once the holder completed")
		assert.Zero(t, w.Metrics().Preemptions)
	})
}

// test_fresh_request_larger_than_pool_is_rejected_and_follower_runs: a
// 20-token prompt on 4 blocks is rejected and the 4-token request behind
// it runs in the same pass.
func TestDynamo_VLLMFreshRequestLargerThanPoolIsRejectedAndFollowerRuns(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(4, 32, 2, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 20), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 1}, Release))
		out := step(t, w, &r, 0)
		require.Len(t, r.rejections, 1)
		assert.Equal(t, uint64(1), r.rejections[0].RequestID)
		assert.Equal(t, []uint64{2}, tokenIDs(out))
		assert.Zero(t, w.Metrics().Preemptions)
	})
}

// test_completion_returns_scheduler_to_idle: two 8-token prompts for 2
// tokens drain to an idle worker.
func TestDynamo_VLLMCompletionReturnsSchedulerToIdle(t *testing.T) {
	eachVLLMCompat(t, makeArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		for _, id := range []uint64{1, 2} {
			require.NoError(t, w.Submit(0, Request{ID: id, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		}
		driveAll(t, w, &r, 0)
		m := w.Metrics()
		assert.Zero(t, m.Waiting)
		assert.Zero(t, m.Running)
		assert.Zero(t, m.ActiveBlocks)
		assert.Len(t, r.completions, 2)
	})
}

// --- router events ---

// test_vllm_pass_visibility_is_pass_start: the first pass of an 8-token
// prompt carries KV events, all on rank 0.
func TestDynamo_VLLMPassVisibilityIsPassStart(t *testing.T) {
	eachVLLMCompat(t, routerArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 71, Tokens: seqTokens(0, 8), MaxTokens: 2}, Release))
		out := step(t, w, &r, 0)
		require.NotEmpty(t, out.KVEvents)
		for _, e := range out.KVEvents {
			assert.Zero(t, e.DPRank)
		}
	})
}

// test_completion_events_apply_cleanly: an 8-token prompt for 4 tokens
// stores blocks, its events apply cleanly, and the worker ends with no
// active block.
func TestDynamo_VLLMCompletionEventsApplyCleanly(t *testing.T) {
	eachVLLMCompat(t, routerArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 41, Tokens: seqTokens(0, 8), MaxTokens: 4}, Release))
		driveAll(t, w, &r, 0)
		chain.apply(r.kvEvents)
		assert.NotEmpty(t, storedHashes(r.kvEvents))
		assert.Zero(t, w.Metrics().ActiveBlocks)
	})
}

// test_native_destination_cancel_preserves_tail_first_eviction: on 3
// blocks, a seed request stores the prefix A → B; a destination for the
// same tokens reserves them and is cancelled; a fresh 8-token request then
// needs two blocks with one free and evicts exactly one cached block, the
// leaf B, so the router's overlap with A → B drops to 1.
func TestDynamo_VLLMNativeDestinationCancelPreservesTailFirstEviction(t *testing.T) {
	args := dynamoVLLMArgs(3, 16, 1, true)
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		seed := seqTokens(0, 8)
		require.NoError(t, w.Submit(0, Request{ID: 81, Tokens: seed, MaxTokens: 1}, Release))
		now := driveAll(t, w, &r, 0)
		chain.apply(r.kvEvents)
		prefix := storedHashes(r.kvEvents)
		require.Len(t, prefix, 2, "the seed stores A -> B")
		assert.Equal(t, 2, chain.overlap(prefix))

		require.NoError(t, w.Reserve(now, Request{ID: 83, Tokens: seed, MaxTokens: 1}))
		now = drive(t, w, &r, now)
		require.Len(t, r.eventsFor(EventDecodeReserved, 83), 1, "reserved at once")
		require.True(t, w.CancelDestination(now, 83))

		require.NoError(t, w.Submit(now, Request{ID: 84, Tokens: seqTokens(100, 8), MaxTokens: 1}, Release))
		out := step(t, w, &r, now)
		assert.Equal(t, 1, removedEventCount(out.KVEvents), "two fresh blocks, one free: one eviction")
		chain.apply(out.KVEvents)
		assert.Equal(t, 1, chain.overlap(prefix), "the leaf B went first")
	})
}

// test_preemption_recompute_events_apply_cleanly: with prefix caching on,
// the newer of two requests is preempted (computed 0, once, at the front
// of the queue), is admitted again for recompute, and the events apply
// cleanly throughout.
func TestDynamo_VLLMPreemptionRecomputeEventsApplyCleanly(t *testing.T) {
	args := dynamoVLLMArgs(6, 16, 2, true, func(a *Args) { a.PreemptionMode = PreemptLIFO })
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		chain := newEventChain(t)
		require.NoError(t, w.Submit(0, Request{ID: 51, Tokens: seqTokens(0, 8), MaxTokens: 8}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 52, Tokens: seqTokens(100, 8), MaxTokens: 8}, Release))
		now := 0.0
		v := sgVLLM(w)
		for i := 0; w.Metrics().Preemptions == 0; i++ {
			require.Less(t, i, 16, "nobody was preempted")
			out := step(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
		}
		s := v.seq(52)
		require.NotNil(t, s)
		assert.Zero(t, s.computed)
		assert.Equal(t, int32(1), s.preempts)
		assert.Equal(t, s, v.waiting.front())
		for i := 0; v.seq(52) != nil && v.seq(52).computed == 0; i++ {
			require.Less(t, i, 32, "the preempted request was never admitted again")
			out := step(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
		}
		for i := 0; w.Scheduler().HasWork(); i++ {
			require.Less(t, i, 64)
			out := step(t, w, &r, now)
			now = out.End
			chain.apply(out.KVEvents)
		}
		assert.Len(t, r.completions, 2)
	})
}

// --- live scheduler ---

// test_scheduler_token_generation_patterns: 200 requests of 1000 prompt
// tokens (half shared, or none) for 100 tokens each on 500 blocks of 64,
// with prefix caching and chunked prefill on or off, all complete (20000
// tokens); blocks are stored only with prefix caching, and the events
// apply cleanly.
func TestDynamo_VLLMSchedulerTokenGenerationPatterns(t *testing.T) {
	for _, shared := range []bool{false, true} {
		for _, caching := range []bool{false, true} {
			for _, chunked := range []bool{false, true} {
				for _, compat := range []bool{false, true} {
					name := fmt.Sprintf("shared %v, caching %v, chunked %v, dynamo_compat %v", shared, caching, chunked, compat)
					a := DefaultArgs()
					a.NumGPUBlocks, a.BlockSize = 500, 64
					a.EnablePrefixCaching, a.EnableChunkedPrefill, a.DynamoCompat = caching, chunked, compat
					w := newWorker(t, a)
					var r record
					for i := range 200 {
						var tokens []uint32
						if shared {
							tokens = repeatToken(1, 500)
						}
						for j := len(tokens); j < 1000; j++ {
							tokens = append(tokens, uint32(i*1000+j+1000))
						}
						require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: tokens, MaxTokens: 100}, Release))
					}
					driveAll(t, w, &r, 0)
					chain := newEventChain(t)
					chain.apply(r.kvEvents)
					assert.Len(t, r.tokens, 200*100, name)
					if caching {
						assert.NotEmpty(t, storedHashes(r.kvEvents), name)
					} else {
						assert.Empty(t, r.kvEvents, name)
					}
				}
			}
		}
	}
}

// test_cache_hit_rate_with_identical_requests: ten identical 65-token
// prompts for 10 tokens each, one after another, on 100 blocks of 64: 100
// tokens, and the worker returns to idle (no active block).
func TestDynamo_VLLMCacheHitRateWithIdenticalRequests(t *testing.T) {
	a := DefaultArgs()
	a.NumGPUBlocks, a.BlockSize = 100, 64
	eachVLLMCompat(t, a, func(t *testing.T, _ bool, w *Worker) {
		var r record
		now := 0.0
		for i := range 10 {
			require.NoError(t, w.Submit(now, Request{ID: uint64(i), Tokens: seqTokens(0, 65), MaxTokens: 10}, Release))
			now += 100
		}
		driveAll(t, w, &r, 0)
		assert.Len(t, r.tokens, 100)
		assert.Zero(t, w.Metrics().ActiveBlocks)
		assert.Positive(t, w.Metrics().TotalBlocks)
		c, ok := r.completion(9)
		require.True(t, ok)
		assert.Equal(t, 64, c.CachedTokens, "a later request hits the cached block")
	})
}

// test_live_pathological_load_no_router_event_errors: eight 8-token
// prompts of one repeated token for 4 tokens each on 6 blocks all complete
// (32 tokens), blocks are stored, and the events apply cleanly.
func TestDynamo_VLLMLivePathologicalLoadNoRouterEventErrors(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(6, 8, 3, true), func(t *testing.T, _ bool, w *Worker) {
		var r record
		for i := range 8 {
			require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: repeatToken(42, 8), MaxTokens: 4}, Release))
		}
		driveAll(t, w, &r, 0)
		newEventChain(t).apply(r.kvEvents)
		assert.Len(t, r.tokens, 32)
		assert.NotEmpty(t, storedHashes(r.kvEvents))
	})
}

// --- forward-pass figures an Output carries ---

func fpmArgs() Args { return dynamoVLLMArgs(16, 16, 4, false) }

// test_fpm_single_prefill_request: an 8-token prompt for 1 token is one
// prefill of 8 tokens and no decode.
func TestDynamo_VLLMFPMSinglePrefillRequest(t *testing.T) {
	eachVLLMCompat(t, fpmArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 1}, Release))
		out := step(t, w, &r, 0)
		assert.Equal(t, 8, out.PrefillTokens)
		assert.Zero(t, out.DecodeTokens)
		assert.Zero(t, w.Metrics().Waiting)
		assert.Positive(t, out.End-out.Start)
	})
}

// test_fpm_prefill_and_decode_mixed_batch: a 4-token prompt prefills (4
// tokens); a second arrives, and the next pass prefills its 4 tokens while
// decoding the first.
func TestDynamo_VLLMFPMPrefillAndDecodeMixedBatch(t *testing.T) {
	eachVLLMCompat(t, fpmArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 3}, Release))
		p1 := step(t, w, &r, 0)
		assert.Equal(t, 4, p1.PrefillTokens)
		require.NoError(t, w.Submit(p1.End, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 3}, Release))
		p2 := step(t, w, &r, p1.End)
		assert.Equal(t, 4, p2.PrefillTokens, "the second is prefilling")
		assert.Equal(t, 1, p2.DecodeTokens, "the first is decoding")
	})
}

// test_fpm_completed_requests_metrics_correct: a 4-token prompt for 1
// token completes in its prefill pass, which counts its 4 tokens.
func TestDynamo_VLLMFPMCompletedRequestsMetricsCorrect(t *testing.T) {
	eachVLLMCompat(t, fpmArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 1}, Release))
		out := step(t, w, &r, 0)
		assert.Equal(t, 4, out.PrefillTokens)
		assert.Len(t, out.Completions, 1)
	})
}

// test_fpm_completed_decode_request_has_kv_context: the decode step that
// completes a request is counted as one decode, with its context in the
// decode time.
func TestDynamo_VLLMFPMCompletedDecodeRequestHasKVContext(t *testing.T) {
	eachVLLMCompat(t, fpmArgs(), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 2}, Release))
		p1 := step(t, w, &r, 0)
		p2 := step(t, w, &r, p1.End)
		assert.Equal(t, 1, p2.DecodeTokens)
		assert.Len(t, p2.Completions, 1)
		assert.Positive(t, p2.DecodeMs)
	})
}

// test_fpm_chunked_prefill_reports_chunk_not_full_prompt: a 16-token
// prompt under a budget of 8 is prefilled over two passes of at most 8
// tokens, 16 in all.
func TestDynamo_VLLMFPMChunkedPrefillReportsChunkNotFullPrompt(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(16, 8, 4, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 16), MaxTokens: 2}, Release))
		p1 := step(t, w, &r, 0)
		p2 := step(t, w, &r, p1.End)
		assert.Positive(t, p1.PrefillTokens)
		assert.LessOrEqual(t, p1.PrefillTokens, 8)
		assert.LessOrEqual(t, p2.PrefillTokens, 8)
		assert.Equal(t, 16, p1.PrefillTokens+p2.PrefillTokens)
	})
}

// test_fpm_queued_requests: two 8-token prompts on 4 blocks under a
// budget of 8: at least one is scheduled.
func TestDynamo_VLLMFPMQueuedRequests(t *testing.T) {
	eachVLLMCompat(t, dynamoVLLMArgs(4, 8, 2, false), func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 1}, Release))
		out := step(t, w, &r, 0)
		assert.GreaterOrEqual(t, out.PrefillTokens+out.DecodeTokens, 1)
	})
}

// test_first_signal_carries_admission_cache_truth: on 16 blocks of 4, a
// 9-token prompt (two full blocks and a partial one) for 3 tokens reports
// no cached tokens at its admission; the same prompt again reports its two
// full blocks, 8 tokens. Dynamo puts the figure on a request's first
// output signal, mocker on its Completion (CachedTokens, the prefix
// credited at the first admission); not mirrored: that the later signals
// carry none.
func TestDynamo_VLLMFirstSignalCarriesAdmissionCacheTruth(t *testing.T) {
	args := smallArgs(16, func(a *Args) {
		a.MaxNumBatchedTokens = intp(16)
		a.MaxNumSeqs = intp(3)
	})
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 90, Tokens: seqTokens(0, 9), MaxTokens: 3}, Release))
		now := drive(t, w, &r, 0)
		cold, ok := r.completion(90)
		require.True(t, ok)
		assert.Zero(t, cold.CachedTokens, "cold")

		require.NoError(t, w.Submit(now, Request{ID: 91, Tokens: seqTokens(0, 9), MaxTokens: 3}, Release))
		drive(t, w, &r, now)
		warm, ok := r.completion(91)
		require.True(t, ok)
		assert.Equal(t, 8, warm.CachedTokens, "the two full blocks")
	})
}

// test_preempted_request_keeps_original_admission_cache_truth: on 6
// blocks of 4 with two running slots, [0..3] is cached by a finished
// request; a filler ([100..107] for 8 tokens) and a victim ([0..3] and
// [200..211] for 4) follow. The victim, newest, is preempted once before
// its first token, completes after its readmission, and reports the 4
// tokens cached at its first admission, not what a later probe found.
// Not mirrored: that its later signals carry no figure (mocker's is on
// the Completion).
func TestDynamo_VLLMPreemptedRequestKeepsOriginalAdmissionCacheTruth(t *testing.T) {
	args := smallArgs(6, func(a *Args) {
		a.MaxNumBatchedTokens = intp(16)
		a.MaxNumSeqs = intp(2)
		a.PreemptionMode = PreemptLIFO
	})
	eachVLLMCompat(t, args, func(t *testing.T, _ bool, w *Worker) {
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 70, Tokens: seqTokens(0, 4), MaxTokens: 1}, Release))
		now := drive(t, w, &r, 0)
		const filler, victim = 71, 72
		require.NoError(t, w.Submit(now, Request{ID: filler, Tokens: seqTokens(100, 8), MaxTokens: 8}, Release))
		require.NoError(t, w.Submit(now, Request{ID: victim, Tokens: append(seqTokens(0, 4), seqTokens(200, 12)...), MaxTokens: 4}, Release))
		preempted := false
		for i := 0; w.Scheduler().HasWork(); i++ {
			require.Less(t, i, 64)
			out := stepOnce(t, w, &r, now)
			now = out.End
			if !preempted && len(r.eventsFor(EventPreempted, victim)) > 0 {
				preempted = true
				var before []uint64
				for _, tk := range r.tokens {
					before = append(before, tk.RequestID)
				}
				assert.NotContains(t, before, uint64(victim), "preempted before its first token")
			}
		}
		assert.True(t, preempted)
		c, ok := r.completion(victim)
		assert.True(t, ok, "completed after its readmission")
		assert.Equal(t, 1, c.Preemptions)
		assert.Equal(t, 4, c.CachedTokens, "the first admission's figure")
	})
}
