package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mirrors of Dynamo's TRT-LLM mocker unit tests (lib/mocker's
// scheduler/trtllm tests): guaranteed_no_evict admission sets aside each
// request's prompt and max_tokens, never preempts, and sizes max_tokens to
// the pool on arrival. Each runs the trtllm engine, and where Dynamo
// contrasts it with vLLM the same workload on the vllm engine too: those
// rows are what fails when the policy is switched off. Each runs under
// mocker's default and under dynamo_compat, with the same figures.

// dynamoTRTLLMArgs is Dynamo's test worker: blocks of 4, no prefix caching,
// chunked prefill on, a budget of batched tokens and a cap of sequences,
// with dynamo_compat as given.
func dynamoTRTLLMArgs(engine EngineType, blocks, budget, seqs int, compat bool) Args {
	a := dynamoVLLMArgs(blocks, budget, seqs, false)
	if engine == EngineTRTLLM {
		a = trtllmArgs(blocks, func(b *Args) {
			b.MaxNumBatchedTokens, b.MaxNumSeqs = a.MaxNumBatchedTokens, a.MaxNumSeqs
			b.EnableChunkedPrefill, b.EnablePrefixCaching = true, false
		})
	}
	a.DynamoCompat = compat
	return a
}

// eachTRTLLMRun runs f as a subtest per engine and setting: the trtllm
// engine, and the vllm engine where Dynamo contrasts the two, each under
// mocker's default and under dynamo_compat.
func eachTRTLLMRun(t *testing.T, engines []EngineType, f func(t *testing.T, e EngineType, compat bool)) {
	for _, e := range engines {
		for _, compat := range []bool{false, true} {
			name := string(e) + "/default"
			if compat {
				name = string(e) + "/dynamo_compat"
			}
			t.Run(name, func(t *testing.T) { f(t, e, compat) })
		}
	}
}

// admits_only_what_fits_to_completion: two requests of 8 prompt and 8
// output tokens each set aside 4 blocks of a 6-block pool, so after one
// pass only the first runs and the second waits; nothing is preempted.
// vllm_admits_optimistically_unlike_trtllm: the vllm engine runs both.
func TestDynamo_TRTLLMAdmitsOnlyWhatFitsToCompletion(t *testing.T) {
	eachTRTLLMRun(t, []EngineType{EngineTRTLLM, EngineVLLM}, func(t *testing.T, e EngineType, compat bool) {
		w := newWorker(t, dynamoTRTLLMArgs(e, 6, 16, 4, compat))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 8}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 8}, Release))
		step(t, w, &r, 0)
		checkWorker(t, w)
		m := w.Metrics()
		if e == EngineTRTLLM {
			assert.Equal(t, 1, m.Running, "only request 1 fits to completion")
			assert.Equal(t, 1, m.Waiting, "request 2 waits at the head of the queue")
			assert.Len(t, r.eventsFor(EventPreempted, 1), 0)
			assert.Zero(t, m.Preemptions)
		} else {
			assert.Equal(t, 2, m.Running, "vLLM admits both on their prompts")
			assert.Zero(t, m.Waiting)
		}
	})
}

// preemption_inducing_workload_never_preempts: in a 4-block pool two
// requests of 4 prompt and 12 output tokens each need the whole pool to
// finish. Under no-evict they run one after the other and both complete
// with no preemption; the vllm engine admits both and preempts.
func TestDynamo_TRTLLMPreemptionInducingWorkloadNeverPreempts(t *testing.T) {
	eachTRTLLMRun(t, []EngineType{EngineTRTLLM, EngineVLLM}, func(t *testing.T, e EngineType, compat bool) {
		w := newWorker(t, dynamoTRTLLMArgs(e, 4, 8, 4, compat))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 12}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 12}, Release))
		drive(t, w, &r, 0)
		require.Len(t, r.completions, 2, "both requests finish")
		for _, c := range r.completions {
			assert.Equal(t, 12, c.OutputTokens)
		}
		if e == EngineTRTLLM {
			assert.Zero(t, w.Metrics().Preemptions, "guaranteed_no_evict never preempts")
			assert.Empty(t, r.eventsOf(EventPreempted))
			c1, _ := r.completion(1)
			c2, _ := r.completion(2)
			assert.LessOrEqual(t, c1.At, c2.FirstTokenAt, "request 2 starts once request 1 has finished")
		} else {
			assert.Positive(t, w.Metrics().Preemptions, "vLLM over-admits and preempts")
		}
	})
}

// no_evict_admission_cap_matches_hardware: Dynamo's replay of a
// trtllm-serve run (7319 blocks of 32; 64 requests of 1096 prompt tokens
// and max_tokens 7000, each setting aside 253 blocks): 28 run, the other
// 36 wait, none is preempted, as the engine measured.
func TestDynamo_TRTLLMNoEvictAdmissionCapMatchesHardware(t *testing.T) {
	eachTRTLLMRun(t, []EngineType{EngineTRTLLM}, func(t *testing.T, _ EngineType, compat bool) {
		a := trtllmArgs(7319, func(a *Args) {
			a.BlockSize = 32
			a.MaxNumSeqs = intp(256)
			a.MaxNumBatchedTokens = intp(8192)
			a.EnablePrefixCaching = false
			a.DynamoCompat = compat
		})
		w := newWorker(t, a)
		for i := range 64 {
			base := uint32(i+1) * 100_000
			require.NoError(t, w.Submit(0, Request{ID: uint64(i + 1), Tokens: seqTokens(base, 1096), MaxTokens: 7000}, Release))
		}
		var r record
		now := 0.0
		for range 40 {
			now = max(step(t, w, &r, now).End, now+1)
		}
		checkWorker(t, w)
		m := w.Metrics()
		assert.Equal(t, 28, m.Running, "floor(7319 / 253) requests fit to completion")
		assert.Equal(t, 64, m.Running+m.Waiting, "the rest wait")
		assert.Zero(t, m.Preemptions)
	})
}

// enqueue_rejects_prompt_with_no_decode_room: a 20-token prompt in a
// 16-token pool is refused without stalling the queue; the 4-token request
// behind it completes. Dynamo refuses it on arrival, mocker when it reaches
// the head of the queue, in the next pass: no request is admitted between.
func TestDynamo_TRTLLMRejectsPromptWithNoDecodeRoom(t *testing.T) {
	eachTRTLLMRun(t, []EngineType{EngineTRTLLM}, func(t *testing.T, e EngineType, compat bool) {
		w := newWorker(t, dynamoTRTLLMArgs(e, 4, 64, 4, compat))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 20), MaxTokens: 4}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 4}, Release))
		drive(t, w, &r, 0)
		require.Len(t, r.rejections, 1)
		assert.Equal(t, uint64(1), r.rejections[0].RequestID)
		assert.Equal(t, RejectNeverFits, r.rejections[0].Code)
		require.Len(t, r.completions, 1)
		assert.Equal(t, uint64(2), r.completions[0].RequestID)
		assert.False(t, w.Scheduler().HasWork(), "the queue drains")
	})
}

// enqueue_clamps_excess_output_to_capacity: max_tokens 40 after a 4-token
// prompt in a 16-token pool is cut to 12, and the request runs to them.
// Dynamo's completion is an ordinary one; mocker marks it Truncated, as it
// does every request a length limit ended.
func TestDynamo_TRTLLMClampsExcessOutputToCapacity(t *testing.T) {
	eachTRTLLMRun(t, []EngineType{EngineTRTLLM}, func(t *testing.T, e EngineType, compat bool) {
		w := newWorker(t, dynamoTRTLLMArgs(e, 4, 64, 4, compat))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 40}, Release))
		drive(t, w, &r, 0)
		require.Len(t, r.completions, 1)
		c := r.completions[0]
		assert.Equal(t, 12, c.OutputTokens)
		assert.True(t, c.Truncated)
		assert.Zero(t, w.Metrics().Preemptions)
		assert.False(t, w.Scheduler().HasWork())
	})
}
