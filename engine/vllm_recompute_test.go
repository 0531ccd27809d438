package engine

import (
	"fmt"
	"testing"

	"github.com/kvstrand/mocker/perf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestVLLM_EveryStreamedRequestCompletes: a request that delivered a token
// always ends in exactly one Completion, never a Rejection, whatever the
// pool, budget and preemptions do to it; its Completion counts the tokens
// it delivered and says whether it stopped short of MaxTokens.
func TestVLLM_EveryStreamedRequestCompletes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		blocks := rapid.IntRange(2, 8).Draw(rt, "blocks")
		args := smallArgs(blocks, func(a *Args) {
			a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
			a.MaxNumBatchedTokens = intp(rapid.IntRange(4, 32).Draw(rt, "budget"))
			a.MaxNumSeqs = intp(rapid.IntRange(1, 4).Draw(rt, "seqs"))
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preempt")
		})
		w, err := New(args, nil, 11)
		if err != nil {
			rt.Fatal(err)
		}
		var r record
		maxTok := map[uint64]int{}
		now := 0.0
		for i := range rapid.IntRange(1, 6).Draw(rt, "requests") {
			id := uint64(i)
			maxTok[id] = rapid.IntRange(1, 40).Draw(rt, "max")
			tokens := seqTokens(uint32(100*i), rapid.IntRange(1, blocks*4+2).Draw(rt, "len"))
			if err := w.Submit(now, Request{ID: id, Tokens: tokens, MaxTokens: maxTok[id]}, Release); err != nil {
				rt.Fatal(err)
			}
			now += rapid.Float64Range(0, 30).Draw(rt, "gap")
			now = drive(rt, w, &r, now)
		}
		drive(rt, w, &r, now)
		if w.Scheduler().HasWork() {
			rt.Fatalf("worker did not drain: %+v", w.Metrics())
		}

		streamed := map[uint64]int{}
		for _, tk := range r.tokens {
			if tk.Index != streamed[tk.RequestID] {
				rt.Fatalf("request %d: token index %d, want %d", tk.RequestID, tk.Index, streamed[tk.RequestID])
			}
			streamed[tk.RequestID]++
		}
		completed := map[uint64]Completion{}
		for _, c := range r.completions {
			if _, dup := completed[c.RequestID]; dup {
				rt.Fatalf("request %d completed twice", c.RequestID)
			}
			completed[c.RequestID] = c
		}
		rejected := map[uint64]Rejection{}
		for _, rj := range r.rejections {
			rejected[rj.RequestID] = rj
		}
		for id, max := range maxTok {
			c, done := completed[id]
			rj, refused := rejected[id]
			switch {
			case streamed[id] > 0 && refused:
				rt.Fatalf("request %d streamed %d tokens, then was rejected: %+v", id, streamed[id], rj)
			case streamed[id] > 0 && !done:
				rt.Fatalf("request %d streamed %d tokens and never completed", id, streamed[id])
			case streamed[id] == 0 && done == refused:
				rt.Fatalf("request %d: completed %v, rejected %v", id, done, refused)
			case done:
				if c.OutputTokens != streamed[id] {
					rt.Fatalf("request %d: completion counts %d tokens, %d streamed", id, c.OutputTokens, streamed[id])
				}
				if c.Truncated != (c.OutputTokens < max) {
					rt.Fatalf("request %d: truncated %v with %d of %d tokens", id, c.Truncated, c.OutputTokens, max)
				}
			}
		}
	})
}

// TestVLLM_FIFOPreemptionRefundsAScheduledStep: FIFO preemption can take
// a request whose decode step the pass already scheduled. A (5 or 6
// tokens) and B (7 tokens) fill a pool of four 4-token blocks; in the
// third pass A's step fits its blocks (with 6, it fills its second), B's
// needs a fifth block, and the oldest running request, A, is preempted for
// it. The pass then counts and emits B's step only.
func TestVLLM_FIFOPreemptionRefundsAScheduledStep(t *testing.T) {
	for _, aLen := range []int{5, 6} {
		t.Run(fmt.Sprintf("A=%d", aLen), func(t *testing.T) {
			w := newWorker(t, smallArgs(4, func(a *Args) { a.PreemptionMode = PreemptFIFO }))
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, aLen), MaxTokens: 10}, Release))
			require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 7), MaxTokens: 10}, Release))
			var r record
			drive(t, w, &r, 0)
			seen := false
			for _, o := range r.outs {
				for _, e := range o.Events {
					if e.Kind != EventPreempted || e.RequestID != 1 || seen {
						continue
					}
					seen = true
					assert.Equal(t, 1, o.DecodeTokens, "the preempted request's step is refunded")
					require.Len(t, o.Tokens, 1)
					assert.Equal(t, uint64(2), o.Tokens[0].RequestID)
					assert.Equal(t, 2, o.Tokens[0].Index)
				}
			}
			require.True(t, seen, "A was never preempted")
		})
	}
}

// TestVLLM_PreemptedGrowthEndsTruncated: a request that outgrows the whole
// pool after streaming tokens ends in a Completion capped at what it
// streamed, not in a never-fits Rejection.
func TestVLLM_PreemptedGrowthEndsTruncated(t *testing.T) {
	w := newWorker(t, smallArgs(3)) // 12 tokens of KV
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 10), MaxTokens: 20}, Release))
	drive(t, w, &r, 0)
	assert.Empty(t, r.rejections)
	c, ok := r.completion(1)
	require.True(t, ok)
	assert.True(t, c.Truncated)
	assert.Less(t, c.OutputTokens, 20)
	assert.Len(t, r.tokens, c.OutputTokens)
	assert.Zero(t, w.Metrics().ActiveBlocks)
}

// TestVLLM_ChunkedOffRecomputesPreempted: with chunked prefill off, only a
// fresh prompt must fit one pass's budget. A preempted request recomputes
// its prompt in one piece and its generated tokens in budget-sized chunks,
// and is never rejected for the budget.
func TestVLLM_ChunkedOffRecomputesPreempted(t *testing.T) {
	w := newWorker(t, smallArgs(6, func(a *Args) {
		a.EnableChunkedPrefill = false
		a.EnablePrefixCaching = false // the recompute starts from nothing
		a.MaxNumBatchedTokens = intp(10)
	}))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(10, 8), MaxTokens: 12}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(90, 8), MaxTokens: 12}, Release))
	drive(t, w, &r, 0)
	require.NotEmpty(t, r.eventsOf(EventPreempted), "the pool is too small for both")
	assert.Empty(t, r.rejections)
	for _, id := range []uint64{1, 2} {
		c, ok := r.completion(id)
		require.True(t, ok, "request %d", id)
		assert.Equal(t, 12, c.OutputTokens, "request %d", id)
	}
	for i, o := range r.outs {
		assert.LessOrEqual(t, o.PrefillTokens+o.DecodeTokens, 10, "pass %d stays within the budget", i)
	}
	// A fresh prompt over the budget is still refused.
	require.NoError(t, w.Submit(1000, Request{ID: 3, Tokens: seqTokens(500, 11), MaxTokens: 1}, Release))
	drive(t, w, &r, 1000)
	require.Len(t, r.rejections, 1)
	assert.Equal(t, RejectBudget, r.rejections[0].Code)
}

// prefillCall is one PrefillMs query.
type prefillCall struct {
	batch       int
	isl, prefix float64
}

// recordingModel is perf.Polynomial that remembers its prefill queries.
type recordingModel struct {
	perf.Polynomial
	calls []prefillCall
}

func (m *recordingModel) PrefillMs(batch int, isl, prefix float64) float64 {
	m.calls = append(m.calls, prefillCall{batch, isl, prefix})
	return m.Polynomial.PrefillMs(batch, isl, prefix)
}

// TestVLLM_PrefillTimeCountsPromptOnly: recomputing a preempted request's
// generated tokens is not prompt work. The prefill model sees input lengths
// clamped to the prompt, and a pass that schedules no prompt token adds
// nothing to the prefill batch.
func TestVLLM_PrefillTimeCountsPromptOnly(t *testing.T) {
	for _, caching := range []bool{false, true} {
		t.Run(map[bool]string{false: "no caching", true: "caching"}[caching], func(t *testing.T) {
			const prompt = 8
			m := &recordingModel{}
			args := smallArgs(6, func(a *Args) { a.EnablePrefixCaching = caching })
			w, err := New(args, m, 7)
			require.NoError(t, err)
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(10, prompt), MaxTokens: 12}, Release))
			require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(90, prompt), MaxTokens: 12}, Release))
			drive(t, w, &r, 0)
			require.NotEmpty(t, r.eventsOf(EventPreempted))
			require.NotEmpty(t, m.calls)
			for _, c := range m.calls {
				assert.LessOrEqual(t, c.isl, float64(prompt), "%+v: ISL counts prompt tokens only", c)
				assert.Greater(t, c.isl, c.prefix, "%+v: a prefill batch member computed a prompt token", c)
			}
		})
	}
}
