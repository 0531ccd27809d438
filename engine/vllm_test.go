package engine

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/perf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVLLM_PrefixReuse(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	var r record
	prompt := seqTokens(100, 10) // 2 full blocks + 2 tokens
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 2}, Release))
	now := drive(t, w, &r, 0)
	first, ok := r.completion(1)
	require.True(t, ok)
	assert.Equal(t, 0, first.CachedTokens)

	// The finished request's blocks sit inactive and serve the next one.
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 2}, Release))
	drive(t, w, &r, now)
	second, ok := r.completion(2)
	require.True(t, ok)
	assert.Equal(t, 8, second.CachedTokens)

	// A prompt of exactly two full blocks must recompute its last token, so
	// only one block is credited.
	exact := seqTokens(500, 8)
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: exact, MaxTokens: 1}, Release))
	now = drive(t, w, &r, now)
	require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: exact, MaxTokens: 1}, Release))
	drive(t, w, &r, now)
	fourth, ok := r.completion(4)
	require.True(t, ok)
	assert.Equal(t, 4, fourth.CachedTokens)
}

func TestVLLM_PrefixCachingOffSharesNothing(t *testing.T) {
	w := newWorker(t, smallArgs(64, func(a *Args) { a.EnablePrefixCaching = false }))
	var r record
	prompt := seqTokens(100, 12)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 2}, Release))
	now := drive(t, w, &r, 0)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 2}, Release))
	drive(t, w, &r, now)
	c, ok := r.completion(2)
	require.True(t, ok)
	assert.Equal(t, 0, c.CachedTokens)
	assert.Empty(t, r.kvEvents, "no KV events without prefix caching")
	assert.Equal(t, 0, w.Metrics().InactiveBlocks)
}

func TestVLLM_Preemption(t *testing.T) {
	for _, tc := range []struct {
		mode   PreemptionMode
		victim uint64
	}{
		{PreemptLIFO, 2}, // the newest running request goes
		{PreemptFIFO, 1}, // the oldest goes
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			// 6 blocks of 4: two 8-token prompts fit, and each grows a block
			// every 4 tokens until the pool runs out on the second new block.
			w := newWorker(t, smallArgs(6, func(a *Args) { a.PreemptionMode = tc.mode }))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(10, 8), MaxTokens: 10}, Release))
			require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(90, 8), MaxTokens: 10}, Release))
			drive(t, w, &r, 0)
			pre := r.eventsOf(EventPreempted)
			require.NotEmpty(t, pre)
			assert.Equal(t, tc.victim, pre[0].RequestID)
			assert.Positive(t, w.Metrics().Preemptions)
			// The victim keeps its generated tokens and still finishes.
			c, ok := r.completion(tc.victim)
			require.True(t, ok)
			assert.Equal(t, 10, c.OutputTokens)
			assert.GreaterOrEqual(t, c.Preemptions, 1)
			var idx []int
			for _, tk := range r.tokens {
				if tk.RequestID == tc.victim {
					idx = append(idx, tk.Index)
				}
			}
			assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, idx, "no token is emitted twice after recompute")
			assert.Len(t, r.completions, 2)
		})
	}
}

func TestVLLM_ChunkedPrefill(t *testing.T) {
	budget := func(a *Args) { a.MaxNumBatchedTokens = intp(8) }
	t.Run("on", func(t *testing.T) {
		w := newWorker(t, smallArgs(64, budget))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Release))
		drive(t, w, &r, 0)
		var chunks []int
		for _, o := range r.outs {
			chunks = append(chunks, o.PrefillTokens)
		}
		assert.Equal(t, []int{8, 8, 4}, chunks)
		require.Len(t, r.tokens, 1)
		assert.Equal(t, r.outs[2].End, r.tokens[0].At, "the first token comes out of the pass that finishes the prompt")
	})
	t.Run("off", func(t *testing.T) {
		w := newWorker(t, smallArgs(64, budget, func(a *Args) { a.EnableChunkedPrefill = false }))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 2}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(50, 6), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 3, Tokens: seqTokens(90, 20), MaxTokens: 1}, Release))
		drive(t, w, &r, 0)
		// Request 1 takes the whole budget; request 2 cannot be split, so it
		// waits for the next pass instead of taking a chunk.
		assert.Equal(t, 8, r.outs[0].PrefillTokens)
		require.Len(t, r.outs[0].Tokens, 1)
		assert.Equal(t, uint64(1), r.outs[0].Tokens[0].RequestID)
		c2, ok := r.completion(2)
		require.True(t, ok)
		assert.Greater(t, c2.FirstTokenAt, r.outs[0].End)
		require.Len(t, r.rejections, 1)
		assert.Equal(t, uint64(3), r.rejections[0].RequestID)
		assert.Equal(t, RejectBudget, r.rejections[0].Code)
	})
}

func TestVLLM_Rejections(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   Args
		prompt int
		code   RejectCode
	}{
		{"max_model_len reached", smallArgs(64, func(a *Args) { a.MaxModelLen = intp(16) }), 16, RejectTooLong},
		{"never fits the pool", smallArgs(4), 17, RejectNeverFits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, tc.args)
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 9, Tokens: seqTokens(1, tc.prompt), MaxTokens: 4}, Release))
			// One token less is accepted.
			require.NoError(t, w.Submit(0, Request{ID: 10, Tokens: seqTokens(500, tc.prompt-1), MaxTokens: 1}, Release))
			drive(t, w, &r, 0)
			require.Len(t, r.rejections, 1)
			assert.Equal(t, uint64(9), r.rejections[0].RequestID)
			assert.Equal(t, tc.code, r.rejections[0].Code)
			assert.NotEmpty(t, r.rejections[0].Reason)
			_, ok := r.completion(10)
			assert.True(t, ok)
			assert.Equal(t, 0, w.Metrics().ActiveBlocks)
		})
	}
}

func TestVLLM_MaxModelLenStopsGeneration(t *testing.T) {
	w := newWorker(t, smallArgs(64, func(a *Args) { a.MaxModelLen = intp(12) }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 10), MaxTokens: 100}, Release))
	drive(t, w, &r, 0)
	c, ok := r.completion(1)
	require.True(t, ok)
	assert.Equal(t, 2, c.OutputTokens)
}

func TestVLLM_TokensStampedAtPassEnd(t *testing.T) {
	a := smallArgs(64, func(a *Args) { a.DecodeSpeedupRatio = 4 })
	w := newWorker(t, a)
	var r record
	require.NoError(t, w.Submit(5, Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 3}, Release))
	drive(t, w, &r, 5)
	require.Len(t, r.outs, 3)
	model := perf.Polynomial{}
	total := float64(a.NumGPUBlocks * a.BlockSize)
	// Pass 1 prefills 20 tokens and emits the first token.
	assert.Equal(t, 5.0, r.outs[0].Start)
	assert.InDelta(t, model.PrefillMs(1, 20, 0), r.outs[0].PrefillMs, 1e-9)
	for i, o := range r.outs {
		assert.InDelta(t, o.Start+o.PrefillMs+o.DecodeMs, o.End, 1e-9)
		require.Len(t, o.Tokens, 1)
		assert.Equal(t, o.End, o.Tokens[0].At, "pass %d", i)
		assert.Positive(t, o.DecodeMs)
	}
	// Decode time is the model's, floored at 1 ms, divided by
	// decode_speedup_ratio: 6 blocks active in pass 2 (21 tokens, one block
	// per 4).
	want := max(perf.MinDecodeMs, model.DecodeMs(1, 6*4, total, 21)) / 4
	assert.InDelta(t, want, r.outs[1].DecodeMs, 1e-9)
	assert.Equal(t, r.outs[0].End, r.outs[1].Start, "the next pass starts when the previous ends")
}

func TestVLLM_PrefillWorkerOneTokenNoDecodeTime(t *testing.T) {
	w := newWorker(t, smallArgs(64, func(a *Args) { a.WorkerType = WorkerPrefill }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 50}, Release))
	drive(t, w, &r, 0)
	require.Len(t, r.outs, 1)
	assert.Zero(t, r.outs[0].DecodeMs)
	assert.Positive(t, r.outs[0].PrefillMs)
	c, ok := r.completion(1)
	require.True(t, ok)
	assert.Equal(t, 1, c.OutputTokens)
}

func TestVLLM_DecodeWorkerNoPrefillTimeNoEvents(t *testing.T) {
	w := newWorker(t, smallArgs(64, func(a *Args) { a.WorkerType = WorkerDecode }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 3}, Release))
	drive(t, w, &r, 0)
	for _, o := range r.outs {
		assert.Zero(t, o.PrefillMs)
	}
	assert.Empty(t, r.kvEvents)
	c, ok := r.completion(1)
	require.True(t, ok)
	assert.Equal(t, 3, c.OutputTokens)
}

// TestVLLM_InactiveHitsWaitBehindHeldKV: hits on inactive blocks do not
// make room. A 12-token prompt p finishes and leaves 3 inactive blocks, tail
// first in the LRU. A held 12-token request then takes the 2 free blocks and
// evicts p's tail. A repeat of p hits 2 inactive blocks but still needs a
// third block nobody can give, so it waits (no partial admission, nothing
// leaked) until the hold is released, and is then credited its 2 blocks.
func TestVLLM_InactiveHitsWaitBehindHeldKV(t *testing.T) {
	w := newWorker(t, smallArgs(5, func(a *Args) { a.WorkerType = WorkerPrefill }))
	var r record
	p := seqTokens(1, 12)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: p, MaxTokens: 1}, Release))
	now := drive(t, w, &r, 0)
	require.Equal(t, 3, w.Metrics().InactiveBlocks)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(100, 12), MaxTokens: 1}, Hold))
	now = drive(t, w, &r, now)
	m := w.Metrics()
	require.Equal(t, 3, m.ActiveBlocks)
	require.Equal(t, 2, m.InactiveBlocks)
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: p, MaxTokens: 1}, Release))
	drive(t, w, &r, now)
	_, done := r.completion(3)
	assert.False(t, done)
	assert.Equal(t, 1, w.Metrics().Waiting)
	require.True(t, w.ReleaseHeld(now+1, 2, Transferred))
	drive(t, w, &r, now+1)
	c, done := r.completion(3)
	require.True(t, done)
	assert.Equal(t, 8, c.CachedTokens)
}

func TestKVEvents_StoredRemovedMonotonic(t *testing.T) {
	w := newWorker(t, smallArgs(6))
	var r record
	prompt := seqTokens(1000, 14) // 3 full blocks and a 2-token tail
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 1}, Release))
	now := drive(t, w, &r, 0)

	_, seqs := kv.BlockHashes(prompt, 4, nil, nil)
	locals, _ := kv.BlockHashes(prompt, 4, nil, nil)
	require.Len(t, r.kvEvents, 1, "one contiguous run, one Stored event")
	st := r.kvEvents[0]
	assert.Equal(t, kv.Stored, st.Kind)
	assert.False(t, st.HasParent)
	require.Len(t, st.Blocks, 3, "the partial tail is not stored")
	for i, b := range st.Blocks {
		assert.Equal(t, seqs[i], b.Hash)
		assert.Equal(t, locals[i], b.TokensHash)
	}

	// A request extending the prompt hits its 3 blocks and stores two more
	// with the 3rd as parent, without evicting (6 blocks, 3 inactive, 3 free).
	longer := append(append([]uint32(nil), prompt...), seqTokens(7000, 6)...)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: longer, MaxTokens: 1}, Release))
	now = drive(t, w, &r, now)
	require.Len(t, r.kvEvents, 2)
	_, lseqs := kv.BlockHashes(longer, 4, nil, nil)
	ext := r.kvEvents[1]
	assert.Equal(t, kv.Stored, ext.Kind)
	assert.True(t, ext.HasParent)
	assert.Equal(t, lseqs[2], ext.Parent)
	require.Len(t, ext.Blocks, 2)
	assert.Equal(t, lseqs[3], ext.Blocks[0].Hash)
	assert.Equal(t, lseqs[4], ext.Blocks[1].Hash)

	// An unrelated 12-token prompt needs 3 blocks with 1 free: two inactive
	// blocks are evicted, least recently used first, and a sequence is
	// released tail first, so the extension goes and the prefix stays.
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(90000, 12), MaxTokens: 1}, Release))
	drive(t, w, &r, now)
	require.Len(t, r.kvEvents, 4)
	rm := r.kvEvents[2]
	assert.Equal(t, kv.Removed, rm.Kind)
	assert.Equal(t, []kv.SeqHash{lseqs[4], lseqs[3]}, rm.RemovedHashes)
	assert.Equal(t, kv.Stored, r.kvEvents[3].Kind)
	for i, e := range r.kvEvents {
		assert.Equal(t, uint64(i), e.ID, "event ids are monotonic from 0")
	}
	checkWorker(t, w)
}

// TestVLLM_DecodeFloorBeforeSpeedup: as in Dynamo, the model floors a decode
// step at 1 ms and decode_speedup_ratio divides the floored value, so a fast
// speculative decoder can step in under 1 ms.
func TestVLLM_DecodeFloorBeforeSpeedup(t *testing.T) {
	w := newWorker(t, smallArgs(1<<16, func(a *Args) { a.DecodeSpeedupRatio = 8 }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 4), MaxTokens: 3}, Release))
	drive(t, w, &r, 0)
	require.Len(t, r.outs, 3)
	decode := r.outs[1]
	assert.Zero(t, decode.PrefillMs)
	// The pool is nearly empty, so the polynomial is at its constant term.
	assert.InDelta(t, 5.74/8, decode.DecodeMs, 1e-3)
	assert.InDelta(t, decode.DecodeMs, decode.Duration(), 1e-12)
}

// TestVLLM_ZeroBudgetStillRejectsAndReserves: once the running requests
// have used the whole token budget, the waiting phase can still refuse
// requests and admit reservations, which cost no tokens, in the same pass.
func TestVLLM_ZeroBudgetStillRejectsAndReserves(t *testing.T) {
	t.Run("rejection", func(t *testing.T) {
		w := newWorker(t, smallArgs(64, func(a *Args) {
			a.MaxNumBatchedTokens = intp(8)
			a.MaxModelLen = intp(16)
		}))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 2}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 16), MaxTokens: 2}, Release))
		drive(t, w, &r, 0)
		require.Len(t, r.outs[0].Rejections, 1, "refused in the first pass")
		assert.Equal(t, uint64(2), r.outs[0].Rejections[0].RequestID)
		assert.Equal(t, 0.0, r.outs[0].Rejections[0].At)
	})
	t.Run("reservation", func(t *testing.T) {
		w := newWorker(t, decodeArgs(64, func(a *Args) { a.MaxNumBatchedTokens = intp(8) }))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 2}, Release))
		require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(100, 8), MaxTokens: 2}))
		drive(t, w, &r, 0)
		res := r.eventsFor(EventDecodeReserved, 2)
		require.Len(t, res, 1)
		assert.Equal(t, 0.0, res[0].At, "reserved in the pass that used the budget up")
	})
}

// TestNew_ValidatesArgs: hand-built Args go through the same checks as
// parsed ones, and the error names the field.
func TestNew_ValidatesArgs(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(*Args)
	}{
		{"handoff_session_timeout_ms", func(a *Args) { a.HandoffSessionTimeoutMs = 0 }},
		{"decode_speedup_ratio", func(a *Args) { a.DecodeSpeedupRatio = -1 }},
		{"block_size", func(a *Args) { a.BlockSize = 1 }},
		{"worker_type", func(a *Args) { a.WorkerType = "both" }},
		{"dp_size", func(a *Args) { a.DPSize = 0 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			args := smallArgs(8, tc.mod)
			_, err := New(args, nil, 1)
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tc.field, ae.Field)
			_, err = NewVLLM(args, nil, 1)
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tc.field, ae.Field)
		})
	}
	a := smallArgs(8)
	a.EngineType = ""
	_, err := New(a, nil, 1)
	assert.NoError(t, err, "an unset engine_type means vllm")
}

// TestVLLM_DecodeTokensCountTheDecodeSteps: a pass reports as decode
// tokens exactly the steps it gave requests past their first token, one
// per token they emit, and never schedules more than its budget. Eight
// requests decode under a 5-token budget, so passes leave some out.
func TestVLLM_DecodeTokensCountTheDecodeSteps(t *testing.T) {
	w := newWorker(t, smallArgs(256, func(a *Args) { a.MaxNumBatchedTokens = intp(5) }))
	var r record
	for i := range 8 {
		require.NoError(t, w.Submit(0, Request{ID: uint64(i + 1), Tokens: seqTokens(uint32(100*i+1), 3), MaxTokens: 12}, Release))
	}
	drive(t, w, &r, 0)
	require.Len(t, r.completions, 8)
	for _, c := range r.completions {
		require.Zero(t, c.Preemptions, "the count holds only without recompute")
	}
	decoded, budgetBound := 0, 0
	for i, o := range r.outs {
		later := 0
		for _, tk := range o.Tokens {
			if tk.Index > 0 {
				later++
			}
		}
		assert.Equal(t, later, o.DecodeTokens, "pass %d", i)
		assert.LessOrEqual(t, o.PrefillTokens+o.DecodeTokens, 5, "pass %d stays within the budget", i)
		if o.DecodeTokens == 5 {
			budgetBound++
		}
		decoded += o.DecodeTokens
	}
	assert.Equal(t, 8*11, decoded)
	assert.Positive(t, budgetBound, "some pass ran out of budget with requests still to decode")
}

// TestWorker_ReportFirstTokensOnly runs the same requests on two workers of
// each engine, one reporting first tokens only: its outputs carry exactly
// the other's tokens of index 0, in order, the same completions, which
// still count every token, and the same events.
func TestWorker_ReportFirstTokensOnly(t *testing.T) {
	for name, args := range map[string]Args{"vllm": smallArgs(256), "sglang": sglangArgs(256)} {
		t.Run(name, func(t *testing.T) {
			var all, first record
			for i, r := range []*record{&all, &first} {
				w := newWorker(t, args)
				if i == 1 {
					w.ReportFirstTokensOnly()
				}
				for id := range 6 {
					require.NoError(t, w.Submit(0, Request{ID: uint64(id + 1), Tokens: seqTokens(uint32(50*id+1), 9), MaxTokens: 7}, Release))
				}
				drive(t, w, r, 0)
			}
			var want []Token
			for _, tk := range all.tokens {
				if tk.Index == 0 {
					want = append(want, tk)
				}
			}
			require.Len(t, want, 6)
			require.Len(t, all.tokens, 6*7)
			assert.Equal(t, want, first.tokens)
			assert.Equal(t, all.completions, first.completions)
			// The tokens it does not report are the same: so are the
			// hashes of the blocks they fill.
			require.NotEmpty(t, all.kvEvents)
			assert.Equal(t, all.kvEvents, first.kvEvents)
			assert.Equal(t, all.events, first.events)
			for _, c := range first.completions {
				assert.Equal(t, 7, c.OutputTokens)
			}
		})
	}
}

// TestWorker_OmitKVEvents: a worker told to omit its KV events steps as
// one that announces them: the same Steps return an Output, the same but
// for the events, and an Output whose pass had events to announce is
// marked so, which keeps it from counting as empty. Three prompt families
// in a pool too small for all their requests make the passes store and
// evict.
func TestWorker_OmitKVEvents(t *testing.T) {
	for name, args := range map[string]Args{"vllm": smallArgs(24), "sglang": sglangArgs(24)} {
		t.Run(name, func(t *testing.T) {
			all, omit := newWorker(t, args), newWorker(t, args)
			omit.OmitKVEvents()
			for _, w := range []*Worker{all, omit} {
				for id := range 9 {
					req := Request{ID: uint64(id + 1), Tokens: seqTokens(uint32(1+100*(id%3)), 12+2*id), MaxTokens: 6}
					require.NoError(t, w.Submit(0, req, Release))
				}
			}
			kinds := map[kv.EventKind]int{}
			now := 0.0
			for i := 0; ; i++ {
				require.Less(t, i, 10000, "workers never parked")
				at, ok := all.workWake()
				at2, ok2 := omit.workWake()
				require.Equal(t, ok, ok2, "step %d", i)
				if !ok {
					break
				}
				require.Equal(t, at, at2, "step %d", i)
				now = max(now, at)
				a, o := all.Step(now), omit.Step(now)
				require.Equal(t, a == nil, o == nil, "step %d", i)
				if a == nil {
					continue
				}
				require.Empty(t, o.KVEvents, "step %d", i)
				require.Equal(t, len(a.KVEvents) > 0, o.kvOmitted, "step %d: marked as omitting events", i)
				for _, ev := range a.KVEvents {
					kinds[ev.Kind]++
				}
				ac, oc := *a, *o
				ac.KVEvents, oc.KVEvents, oc.kvOmitted = nil, nil, false
				require.Equal(t, ac, oc, "step %d", i)
				now = max(now, a.End)
			}
			assert.NotZero(t, kinds[kv.Stored], "no block stored")
			assert.NotZero(t, kinds[kv.Removed], "no block evicted")
		})
	}
}

// TestKVRecorder_OmitLeavesASilentRecorderSilent: told to omit, a
// recorder that records marks an Output whose pass had events; one that
// records nothing (a worker announcing no blocks, a decode worker) marks
// none, so its Outputs stay empty as before.
func TestKVRecorder_OmitLeavesASilentRecorderSilent(t *testing.T) {
	for _, emit := range []bool{true, false} {
		r := kvRecorder{emit: emit}
		r.omitAll()
		r.stored(1, 1, 0, false, 0)
		var out Output
		r.flushTo(&out)
		assert.Empty(t, out.KVEvents, "emit %v", emit)
		assert.Equal(t, emit, out.kvOmitted, "emit %v", emit)
		assert.Equal(t, emit, !out.empty(), "emit %v", emit)
	}
}

// TestVLLM_AdmissionCreditsActivePrefixHits: a request whose prefix is
// held by a running request needs fresh blocks only for the rest, so it is
// admitted beside that request into a pool that could not hold both
// whole. (9 blocks of 4 tokens: A takes 4 for its 16-token prompt; B's 24
// tokens need 6, of which 4 are A's.)
func TestVLLM_AdmissionCreditsActivePrefixHits(t *testing.T) {
	w := newWorker(t, smallArgs(9))
	prompt := seqTokens(1, 24)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt[:16], MaxTokens: 2}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: prompt, MaxTokens: 2}, Release))
	var r record
	drive(t, w, &r, 0)
	require.Len(t, r.completions, 2)
	a, b := r.completions[0], r.completions[1]
	if a.RequestID != 1 {
		a, b = b, a
	}
	assert.Equal(t, 16, b.CachedTokens, "B found A's four blocks")
	assert.Equal(t, a.FirstTokenAt, b.FirstTokenAt, "B ran in A's first pass")
}

// TestVLLM_GeneratedBlocksAreStored: blocks that decode fills with
// generated tokens are stored like the prompt's, findable by their
// sequence hashes, as vLLM caches them. An 8-token prompt that generates
// 9 tokens on 4-token blocks computes 16 tokens' KV: four full blocks.
func TestVLLM_GeneratedBlocksAreStored(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	prompt := seqTokens(1, 8)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 9}, Release))
	var r record
	drive(t, w, &r, 0)
	require.Len(t, r.tokens, 9)
	seq := slices.Clone(prompt)
	for _, tk := range r.tokens {
		seq = append(seq, tk.Token)
	}
	_, want := kv.BlockHashes(seq[:16], 4, nil, nil)
	var got []kv.SeqHash
	for _, ev := range r.kvEvents {
		if ev.Kind == kv.Stored {
			for _, b := range ev.Blocks {
				got = append(got, b.Hash)
			}
		}
	}
	assert.Equal(t, want, got)
}

// TestVLLM_SeqFillsItsSizeClass: a seq is the 256 bytes its layout
// comment counts on. Objects of that size class start on a cache line, so
// a decode pass over a running request reads its first two lines; a seq of
// 257 bytes or more goes to the 288-byte class, whose objects straddle
// lines.
func TestVLLM_SeqFillsItsSizeClass(t *testing.T) {
	assert.Equal(t, uintptr(256), unsafe.Sizeof(seq{}), "seq's size: see the comment on its fields")
}
