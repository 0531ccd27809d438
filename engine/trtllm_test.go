package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// A decode destination under guaranteed_no_evict is reserved only when its
// prompt and all its max_tokens fit beside what the requests already taken
// in may still take: in an 8-block pool, two 8-token destinations of
// max_tokens 16 (6 blocks each to their end) go one after the other, where
// the vllm engine reserves both at once on their prompts (2 blocks each).
func TestTRTLLM_DestinationSetsAsideToCompletion(t *testing.T) {
	for _, e := range []EngineType{EngineTRTLLM, EngineVLLM} {
		t.Run(string(e), func(t *testing.T) {
			mod := func(a *Args) { a.WorkerType = WorkerDecode; a.MaxNumSeqs = intp(4) }
			args := decodeArgs(8, mod)
			if e == EngineTRTLLM {
				args = trtllmArgs(8, mod)
			}
			w := newWorker(t, args)
			var r record
			require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(0, 8), MaxTokens: 16}))
			require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 16}))
			checkWorker(t, w)
			require.Len(t, r.eventsFor(EventDecodeReserved, 1), 0) // events go out with the next step
			now := drive(t, w, &r, 0)
			require.Len(t, r.eventsFor(EventDecodeReserved, 1), 1)
			if e == EngineVLLM {
				assert.Len(t, r.eventsFor(EventDecodeReserved, 2), 1, "vLLM reserves the prompt only")
				return
			}
			assert.Empty(t, r.eventsFor(EventDecodeReserved, 2), "the second does not fit to completion")
			assert.Equal(t, 1, w.Metrics().ReservedRequests)

			// Activated, the first runs to its end; the second is reserved
			// once its blocks are free, and runs too.
			require.True(t, w.Activate(now, 1))
			now = drive(t, w, &r, now)
			checkWorker(t, w)
			c1, ok := r.completion(1)
			require.True(t, ok)
			assert.Equal(t, 16, c1.OutputTokens)
			res := r.eventsFor(EventDecodeReserved, 2)
			require.Len(t, res, 1)
			assert.GreaterOrEqual(t, res[0].At, c1.At)
			require.True(t, w.Activate(now, 2))
			drive(t, w, &r, now)
			_, ok = r.completion(2)
			assert.True(t, ok)
			assert.Zero(t, w.Metrics().Preemptions)
			assert.Zero(t, w.Metrics().ActiveBlocks)
		})
	}
}

// max_utilization keeps the vLLM core's rules: the workload
// guaranteed_no_evict runs one request at a time is admitted whole, and
// the pool running dry preempts the newest request.
func TestTRTLLM_MaxUtilizationPreempts(t *testing.T) {
	w := newWorker(t, trtllmArgs(4, func(a *Args) {
		a.MaxNumBatchedTokens = intp(8)
		a.EnablePrefixCaching = false
		a.TRTLLM.CapacitySchedulerPolicy = TRTLLMMaxUtilization
	}))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 40}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 4), MaxTokens: 12}, Release))
	step(t, w, &r, 0)
	assert.Equal(t, 2, w.Metrics().Running, "both admitted on their prompts")
	drive(t, w, &r, 0)
	assert.Positive(t, w.Metrics().Preemptions)
	c1, ok := r.completion(1)
	require.True(t, ok)
	assert.True(t, c1.Truncated, "max_tokens is not cut on arrival: the pool's length limit ends it")
}

// Whatever arrives, guaranteed_no_evict never preempts, keeps every
// admitted request's room to finish (checkWorker audits it after every
// step), and ends every request: a prompt that fills the pool alone is
// refused (and, with chunked prefill off, one longer than the budget),
// every other one completes with max_tokens cut to the pool's
// room after its prompt, Truncated exactly when it was cut. Prefix caching
// and shared prefixes credit active hits at admission, so the walk that
// finds them is covered too.
func TestTRTLLM_NeverPreemptsAndEndsEverything(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		blocks := rapid.IntRange(2, 24).Draw(rt, "blocks")
		chunked := rapid.Bool().Draw(rt, "chunked")
		budget := rapid.IntRange(4, 64).Draw(rt, "budget")
		w, err := New(trtllmArgs(blocks, func(a *Args) {
			a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
			a.EnableChunkedPrefill = chunked
			a.MaxNumBatchedTokens = intp(budget)
			a.MaxNumSeqs = intp(rapid.IntRange(1, 8).Draw(rt, "seqs"))
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preemption_mode")
			a.DynamoCompat = rapid.Bool().Draw(rt, "dynamo_compat")
		}), nil, 5)
		if err != nil {
			rt.Fatal(err)
		}
		capTokens := blocks * 4
		var r record
		want := map[uint64]Request{}
		now := 0.0
		n := rapid.IntRange(1, 30).Draw(rt, "requests")
		for id := range uint64(n) {
			now += rapid.Float64Range(0, 30).Draw(rt, "gap")
			prefix := seqTokens(uint32(1000*rapid.IntRange(0, 2).Draw(rt, "prefix")), rapid.IntRange(0, 16).Draw(rt, "plen"))
			req := Request{ID: id, Tokens: append(prefix, seqTokens(uint32(100000+100*id), rapid.IntRange(1, 24).Draw(rt, "tlen"))...),
				MaxTokens: rapid.IntRange(1, 40).Draw(rt, "max")}
			want[id] = req
			if err := w.Submit(now, req, Release); err != nil {
				rt.Fatal(err)
			}
			if rapid.Bool().Draw(rt, "step") {
				now = drive(rt, w, &r, now)
			}
		}
		drive(rt, w, &r, now)
		if m := w.Metrics(); m.Preemptions != 0 || w.Scheduler().HasWork() || m.ActiveBlocks != 0 {
			rt.Fatalf("after the run: %+v", m)
		}
		if got := len(r.completions) + len(r.rejections); got != n {
			rt.Fatalf("%d requests, %d ended", n, got)
		}
		for _, rj := range r.rejections {
			p := len(want[rj.RequestID].Tokens)
			if !(rj.Code == RejectNeverFits && p >= capTokens) && !(rj.Code == RejectBudget && !chunked && p > budget) {
				rt.Fatalf("request %d of %d prompt tokens refused (%s) by a pool of %d tokens", rj.RequestID, p, rj.Code, capTokens)
			}
		}
		for _, c := range r.completions {
			req := want[c.RequestID]
			out := min(req.MaxTokens, capTokens-len(req.Tokens))
			if c.OutputTokens != out || c.Truncated != (out < req.MaxTokens) || c.Preemptions != 0 {
				rt.Fatalf("request %d (%d prompt, max %d): %d tokens, truncated %v; want %d", c.RequestID, len(req.Tokens), req.MaxTokens,
					c.OutputTokens, c.Truncated, out)
			}
		}
	})
}
