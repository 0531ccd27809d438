package engine

import (
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/perf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sgOf(w *Worker) *SGLang { return w.Scheduler().(*SGLang) }

// stepOnce runs the next due pass and records it.
func stepOnce(t *testing.T, w *Worker, r *record, now float64) *Output {
	t.Helper()
	at, ok := w.workWake()
	require.True(t, ok, "a pass is due")
	step(t, w, r, max(now, at))
	checkWorker(t, w)
	return &r.outs[len(r.outs)-1]
}

func tokenIDs(out *Output) []uint64 {
	var ids []uint64
	for _, tk := range out.Tokens {
		ids = append(ids, tk.RequestID)
	}
	return ids
}

func TestNewSGLang_ArgErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(*Args)
	}{
		{"sglang", func(a *Args) { a.SGLang = nil }},
		{"sglang.page_size", func(a *Args) { a.SGLang.PageSize = 8 }},
		{"sglang.chunked_prefill_size", func(a *Args) { a.SGLang.ChunkedPrefillSize = 10 }},
		{"sglang.schedule_policy", func(a *Args) { a.SGLang.SchedulePolicy = "random" }},
		{"sglang.schedule_conservativeness", func(a *Args) { a.SGLang.ScheduleConservativeness = -1 }},
		{"num_gpu_blocks", func(a *Args) { a.NumGPUBlocks = 0 }},
		{"engine_type", func(a *Args) { a.EngineType = EngineVLLM }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := NewSGLang(sglangArgs(8, tc.mod), nil, 1)
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tc.field, ae.Field)
		})
	}
	_, err := NewSGLang(sglangArgs(8), nil, 1)
	require.NoError(t, err)
	w, err := New(sglangArgs(8), nil, 1)
	require.NoError(t, err)
	assert.IsType(t, &SGLang{}, w.Scheduler(), "New dispatches engine_type sglang")
}

func TestSGLang_RadixReuse(t *testing.T) {
	w := newWorker(t, sglangArgs(64))
	var r record
	prompt := seqTokens(100, 10) // 2 full pages + 2 tokens
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 2}, Release))
	now := driveAny(t, w, &r, 0, true)
	first, ok := r.completion(1)
	require.True(t, ok)
	assert.Zero(t, first.CachedTokens)

	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 2}, Release))
	now = driveAny(t, w, &r, now, true)
	second, ok := r.completion(2)
	require.True(t, ok)
	assert.Equal(t, 8, second.CachedTokens)
	// The second run stored nothing new: each page is advertised once.
	stored := 0
	for _, e := range r.kvEvents {
		require.Equal(t, kv.Stored, e.Kind)
		stored += len(e.Blocks)
	}
	assert.Equal(t, 2, stored)

	// An exact two-page prompt recomputes its last token: one page credited.
	exact := seqTokens(500, 8)
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: exact, MaxTokens: 1}, Release))
	now = driveAny(t, w, &r, now, true)
	require.NoError(t, w.Submit(now, Request{ID: 4, Tokens: exact, MaxTokens: 1}, Release))
	driveAny(t, w, &r, now, true)
	fourth, ok := r.completion(4)
	require.True(t, ok)
	assert.Equal(t, 4, fourth.CachedTokens)
	m := w.Metrics()
	assert.Zero(t, m.ActiveBlocks)
	assert.Equal(t, 4, m.InactiveBlocks, "2 pages of prompt 1 and 2 of prompt 3 stay cached")
}

func TestSGLang_PageAlignedInsertion(t *testing.T) {
	w := newWorker(t, sglangArgs(64))
	var r record
	prompt := seqTokens(100, 10)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 4}, Release))
	driveAny(t, w, &r, 0, true)
	// KV covers the prompt and the first 3 generated tokens (the last one
	// is never fed back): 13 tokens, so 3 full pages are inserted and the
	// partial fourth is freed.
	seq := append([]uint32(nil), prompt...)
	for _, tk := range r.tokens {
		seq = append(seq, tk.Token)
	}
	require.Len(t, seq, 14)
	locals, seqs := kv.BlockHashes(seq[:12], 4, nil, nil)
	var blocks []kv.Block
	for _, e := range r.kvEvents {
		blocks = append(blocks, e.Blocks...)
	}
	require.Len(t, blocks, 3)
	for i, b := range blocks {
		assert.Equal(t, seqs[i], b.Hash)
		assert.Equal(t, locals[i], b.TokensHash)
	}
	m := w.Metrics()
	assert.Equal(t, 3, m.InactiveBlocks)
	assert.Equal(t, 61, m.FreeBlocks)
}

func TestSGLang_ExtendVsDecodePassShape(t *testing.T) {
	w := newWorker(t, sglangArgs(64))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 10}, Release))
	p1 := stepOnce(t, w, &r, 0)
	assert.Equal(t, []uint64{1}, tokenIDs(p1))
	assert.Equal(t, 8, p1.PrefillTokens)
	p2 := stepOnce(t, w, &r, p1.End)
	assert.Equal(t, []uint64{1}, tokenIDs(p2))
	assert.Zero(t, p2.PrefillTokens)

	// A new arrival makes the next pass an extend pass: only it produces a
	// token, the running request waits.
	require.NoError(t, w.Submit(p2.End, Request{ID: 2, Tokens: seqTokens(50, 8), MaxTokens: 10}, Release))
	p3 := stepOnce(t, w, &r, p2.End)
	assert.Equal(t, []uint64{2}, tokenIDs(p3))
	assert.Equal(t, 8, p3.PrefillTokens)
	assert.Zero(t, p3.DecodeTokens)
	assert.Positive(t, p3.PrefillMs)
	model := perf.Polynomial{}
	assert.InDelta(t, max(perf.MinDecodeMs, model.DecodeMs(1, 8, 64*4, 8)), p3.DecodeMs, 1e-9,
		"the first token is sampled in a decode step over the new prompt alone")
	p4 := stepOnce(t, w, &r, p3.End)
	assert.Equal(t, []uint64{1, 2}, tokenIDs(p4))
	assert.Equal(t, 2, p4.DecodeTokens)
	assert.Zero(t, p4.PrefillMs)
}

func TestSGLang_DecodeTimeUsesContextSum(t *testing.T) {
	a := sglangArgs(64, func(a *Args) { a.DecodeSpeedupRatio = 4 })
	w := newWorker(t, a)
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 3}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(90, 6), MaxTokens: 3}, Release))
	p1 := stepOnce(t, w, &r, 0)
	model := perf.Polynomial{}
	assert.InDelta(t, model.PrefillMs(2, 13, 0), p1.PrefillMs, 1e-9, "prefill on the batch means")
	pool := float64(64 * 4)
	assert.InDelta(t, max(perf.MinDecodeMs, model.DecodeMs(2, 26, pool, 13))/4, p1.DecodeMs, 1e-9,
		"then a decode step samples both first tokens, on the prompts' lengths")
	assert.InDelta(t, p1.Start+p1.PrefillMs+p1.DecodeMs, p1.End, 1e-9)
	p2 := stepOnce(t, w, &r, p1.End)
	// Context: 20+1 and 6+1 tokens, the logical lengths, not pages.
	want := max(perf.MinDecodeMs, model.DecodeMs(2, 28, pool, 14)/4)
	assert.InDelta(t, want, p2.DecodeMs, 1e-9)
	assert.InDelta(t, p2.Start+p2.DecodeMs, p2.End, 1e-9)
	for _, tk := range p2.Tokens {
		assert.Equal(t, p2.End, tk.At)
	}
}

func TestSGLang_ChunkedPrefill(t *testing.T) {
	t.Run("chunks", func(t *testing.T) {
		w := newWorker(t, sglangArgs(64, func(a *Args) { a.SGLang.ChunkedPrefillSize = 8 }))
		var r record
		prompt := seqTokens(1, 20)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 1}, Release))
		driveAny(t, w, &r, 0, true)
		var chunks []int
		for _, o := range r.outs {
			chunks = append(chunks, o.PrefillTokens)
		}
		assert.Equal(t, []int{8, 8, 4}, chunks)
		require.Len(t, r.tokens, 1)
		assert.Equal(t, r.outs[2].End, r.tokens[0].At, "the first token comes out of the pass that finishes the prompt")
		// Each chunk's pages enter the tree as they are computed.
		_, seqs := kv.BlockHashes(prompt, 4, nil, nil)
		require.Len(t, r.outs[0].KVEvents, 1)
		assert.Equal(t, []kv.Block{{Hash: seqs[0], TokensHash: r.outs[0].KVEvents[0].Blocks[0].TokensHash},
			{Hash: seqs[1], TokensHash: r.outs[0].KVEvents[0].Blocks[1].TokensHash}}, r.outs[0].KVEvents[0].Blocks)
		require.Len(t, r.outs[1].KVEvents, 1)
		assert.Equal(t, seqs[1], r.outs[1].KVEvents[0].Parent)
		assert.Len(t, r.outs[1].KVEvents[0].Blocks, 2)
		require.Len(t, r.outs[2].KVEvents, 1)
		assert.Equal(t, seqs[4], r.outs[2].KVEvents[0].Blocks[0].Hash)
	})
	t.Run("off", func(t *testing.T) {
		w := newWorker(t, sglangArgs(64, func(a *Args) {
			a.SGLang.ChunkedPrefillSize = 8
			a.EnableChunkedPrefill = false
		}))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Release))
		driveAny(t, w, &r, 0, true)
		require.Len(t, r.outs, 1)
		assert.Equal(t, 20, r.outs[0].PrefillTokens, "the prompt is prefilled whole")
	})
	t.Run("max_prefill_tokens", func(t *testing.T) {
		w := newWorker(t, sglangArgs(64, func(a *Args) { a.SGLang.MaxPrefillTokens = 10 }))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(50, 8), MaxTokens: 1}, Release))
		p1 := stepOnce(t, w, &r, 0)
		assert.Equal(t, []uint64{1}, tokenIDs(p1), "the second prompt exceeds what is left of max_prefill_tokens")
		p2 := stepOnce(t, w, &r, p1.End)
		assert.Equal(t, []uint64{2}, tokenIDs(p2))
	})
}

func TestSGLang_LPMOrdering(t *testing.T) {
	shared := seqTokens(500, 12)
	for _, tc := range []struct {
		policy  string
		filler  int // unrelated requests queued before the matching one
		winner  uint64
		comment string
	}{
		{SGLangPolicyFIFO, 1, 10, "fifo keeps arrival order"},
		{SGLangPolicyLPM, 1, 1000, "lpm takes the longest cached prefix first"},
		{SGLangPolicyLPM, sglangLPMMaxQueue, 10, "lpm falls back to fifo past 128 waiting"},
	} {
		t.Run(tc.comment, func(t *testing.T) {
			w := newWorker(t, sglangArgs(1024, func(a *Args) {
				a.MaxNumSeqs = intp(1)
				a.SGLang.SchedulePolicy = tc.policy
			}))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: shared, MaxTokens: 1}, Release))
			now := driveAny(t, w, &r, 0, true)
			for i := range tc.filler {
				require.NoError(t, w.Submit(now, Request{ID: uint64(10 + i), Tokens: seqTokens(uint32(9000+100*i), 12), MaxTokens: 1}, Release))
			}
			require.NoError(t, w.Submit(now, Request{ID: 1000, Tokens: append(append([]uint32(nil), shared...), 7, 7, 7, 7), MaxTokens: 1}, Release))
			out := stepOnce(t, w, &r, now)
			assert.Equal(t, []uint64{tc.winner}, tokenIDs(out))
		})
	}
}

// retractionScenario runs two long decodes on a 7-page pool with a thin
// admission reserve (clip 1) so the second is admitted and the pool later
// runs dry. It returns the record and the ratio observed after each pass.
func retractionScenario(t *testing.T) (*Worker, *record, []float64) {
	w := newWorker(t, sglangArgs(7, func(a *Args) { a.SGLang.ClipMaxNewTokens = 1 }))
	g := sgOf(w)
	var r record
	var ratios []float64
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(10, 8), MaxTokens: 12}, Release))
	now := 0.0
	for range 3 {
		now = stepOnce(t, w, &r, now).End
		ratios = append(ratios, g.NewTokenRatio())
	}
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(90, 8), MaxTokens: 12}, Release))
	for i := 0; ; i++ {
		require.Less(t, i, 1000)
		if _, ok := w.workWake(); !ok {
			break
		}
		now = stepOnce(t, w, &r, now).End
		ratios = append(ratios, g.NewTokenRatio())
	}
	return w, &r, ratios
}

func TestSGLang_RetractsFewestOutput(t *testing.T) {
	w, r, _ := retractionScenario(t)
	pre := r.eventsOf(EventPreempted)
	require.NotEmpty(t, pre)
	assert.Equal(t, uint64(2), pre[0].RequestID, "the later request has fewer output tokens")
	assert.Positive(t, w.Metrics().Preemptions)
	for _, id := range []uint64{1, 2} {
		c, ok := r.completion(id)
		require.True(t, ok)
		assert.Equal(t, 12, c.OutputTokens)
		var idx []int
		for _, tk := range r.tokens {
			if tk.RequestID == id {
				idx = append(idx, tk.Index)
			}
		}
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, idx, "request %d: no token twice after recompute", id)
	}
	c2, _ := r.completion(2)
	assert.GreaterOrEqual(t, c2.Preemptions, 1)
	assert.Zero(t, w.Metrics().ActiveBlocks)
}

func TestSGLang_VictimChoice(t *testing.T) {
	g, err := NewSGLang(sglangArgs(8), nil, 1)
	require.NoError(t, err)
	mk := func(out, tokens int) *sgReq {
		return &sgReq{reqCore: reqCore{out: out, length: tokens}, state: sgRunning}
	}
	a, b, c := mk(5, 20), mk(2, 10), mk(7, 30)
	g.running = []*sgReq{a, b, c}
	assert.Same(t, b, g.victim(), "fewest output tokens, wherever it sits")
	d := mk(2, 40)
	g.running = []*sgReq{a, b, c, d}
	assert.Same(t, d, g.victim(), "the longer sequence among equals")
	g.running = []*sgReq{a}
	assert.Nil(t, g.victim(), "the last running request is never retracted")
	chunk := &sgReq{reqCore: reqCore{out: 9, length: 20}, kvLen: 8, state: sgWaiting}
	g.waiting = []*sgReq{chunk}
	assert.Same(t, chunk, g.victim(), "a request mid chunked prefill can always go")
}

func TestSGLang_NewTokenRatioDecayAndReset(t *testing.T) {
	t.Run("decay per decode pass", func(t *testing.T) {
		w := newWorker(t, sglangArgs(256, func(a *Args) { a.SGLang.ScheduleConservativeness = 0.5 }))
		g := sgOf(w)
		init := 0.7 * 0.5
		floor := 0.14 * init
		step := (init - floor) / 600
		assert.InDelta(t, init, g.NewTokenRatio(), 1e-12)
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 700}, Release))
		now := stepOnce(t, w, &r, 0).End
		assert.InDelta(t, init, g.NewTokenRatio(), 1e-12, "an extend pass does not decay")
		for i := 1; i <= 650; i++ {
			now = stepOnce(t, w, &r, now).End
			assert.InDelta(t, max(floor, init-float64(i)*step), g.NewTokenRatio(), 1e-9, "decode pass %d", i)
		}
		assert.InDelta(t, floor, g.NewTokenRatio(), 1e-12, "the ratio stops at its floor")
	})
	t.Run("reset on retraction", func(t *testing.T) {
		_, r, ratios := retractionScenario(t)
		var at int
		for i, o := range r.outs {
			for _, e := range o.Events {
				if e.Kind == EventPreempted {
					at = i
				}
			}
		}
		require.Positive(t, at)
		assert.Less(t, ratios[at-1], 0.7, "decayed before the retraction")
		assert.InDelta(t, 0.7, ratios[at], 1e-12, "back to the initial ratio")
	})
	t.Run("reset on allocation failure", func(t *testing.T) {
		// A held aggregated request decodes (decaying the ratio), then fills
		// the pool; the next admission cannot allocate.
		w := newWorker(t, sglangArgs(4))
		g := sgOf(w)
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 4}, Hold))
		now := driveAny(t, w, &r, 0, false)
		require.Less(t, g.NewTokenRatio(), 0.7)
		require.Equal(t, 4, w.Metrics().HeldBlocks)
		require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(50, 8), MaxTokens: 1}, Release))
		driveAny(t, w, &r, now, false)
		assert.True(t, g.oom)
		assert.InDelta(t, 0.7, g.NewTokenRatio(), 1e-12)
		assert.Equal(t, 1, w.Metrics().Waiting)
	})
}

func TestSGLang_AdmissionReservesRunningGrowth(t *testing.T) {
	// 300 pages of 4 tokens. A long decode reserves 0.7 × its remaining
	// 999 tokens, so a 500-token prompt (plus its 10 outputs) does not fit
	// the remaining budget of about 488 tokens although the pages are
	// free, and waits.
	w := newWorker(t, sglangArgs(300))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1000}, Release))
	now := stepOnce(t, w, &r, 0).End
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(5000, 500), MaxTokens: 10}, Release))
	out := stepOnce(t, w, &r, now)
	assert.Equal(t, []uint64{1}, tokenIDs(out), "a decode pass: request 2 was not admitted")
	m := w.Metrics()
	assert.Equal(t, 1, m.Waiting)
	assert.Greater(t, m.FreeBlocks, 500/4+10)
	// A small prompt that would fit queues behind it: admission stops at
	// the first request that does not fit.
	require.NoError(t, w.Submit(out.End, Request{ID: 3, Tokens: seqTokens(7000, 40), MaxTokens: 10}, Release))
	out = stepOnce(t, w, &r, out.End)
	assert.Equal(t, []uint64{1}, tokenIDs(out))
	assert.Equal(t, 2, w.Metrics().Waiting)
	require.True(t, w.Cancel(out.End, 1))
	out = stepOnce(t, w, &r, out.End)
	assert.Equal(t, []uint64{2, 3}, tokenIDs(out), "both admitted once the long decode is gone")
	driveAny(t, w, &r, out.End, true)
	assert.Len(t, r.completions, 2)
}

func TestSGLang_Rejections(t *testing.T) {
	w := newWorker(t, sglangArgs(4))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 17), MaxTokens: 1}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(100, 14), MaxTokens: 4}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 3, Tokens: seqTokens(200, 16), MaxTokens: 1}, Release))
	driveAny(t, w, &r, 0, true)
	require.Len(t, r.rejections, 2)
	assert.Equal(t, uint64(1), r.rejections[0].RequestID, "17 prompt tokens need 5 pages of 4")
	assert.Equal(t, uint64(2), r.rejections[1].RequestID, "14 prompt + 3 fed-back output tokens need 5 pages")
	for _, rj := range r.rejections {
		assert.Equal(t, RejectNeverFits, rj.Code)
		assert.Contains(t, rj.Reason, "num_gpu_blocks is 4")
	}
	_, ok := r.completion(3)
	assert.True(t, ok, "exactly the pool fits")
	assert.Zero(t, w.Metrics().ActiveBlocks)
}

func TestSGLang_NoKVEventsOnDecodeOrWithoutCaching(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Args)
	}{
		{"decode worker", func(a *Args) { a.WorkerType = WorkerDecode }},
		{"prefix caching off", func(a *Args) { a.EnablePrefixCaching = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, sglangArgs(64, tc.mod))
			var r record
			prompt := seqTokens(1, 12)
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 3}, Release))
			now := driveAny(t, w, &r, 0, true)
			require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 3}, Release))
			driveAny(t, w, &r, now, true)
			assert.Empty(t, r.kvEvents)
			require.Len(t, r.completions, 2)
			for _, o := range r.outs {
				if w.Scheduler().(*SGLang).decodeWorker {
					assert.Zero(t, o.PrefillMs)
				}
			}
		})
	}
	w := newWorker(t, sglangArgs(64, func(a *Args) { a.EnablePrefixCaching = false }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 3}, Release))
	driveAny(t, w, &r, 0, true)
	assert.Zero(t, w.Metrics().InactiveBlocks, "nothing is cached without prefix caching")
}

func TestSGLang_ReserveActivate(t *testing.T) {
	w := newWorker(t, sglangArgs(64, func(a *Args) {
		a.WorkerType = WorkerDecode
		a.MaxNumSeqs = intp(1)
	}))
	var r record
	prefix := seqTokens(1, 12)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prefix, MaxTokens: 1}, Release))
	now := driveAny(t, w, &r, 0, true)

	long := append(append([]uint32(nil), prefix...), seqTokens(900, 6)...)
	require.NoError(t, w.Reserve(now, Request{ID: 2, Tokens: long, MaxTokens: 4}))
	now = driveAny(t, w, &r, now, true)
	res := r.eventsOf(EventDecodeReserved)
	require.Len(t, res, 1)
	// 12 of 18 tokens (3 pages of 4) are cached; the 6 others span 2
	// pages, and a transfer moves whole pages: 8 tokens.
	assert.Equal(t, 8, res[0].MissingTokens, "the 3 cached pages are reused")
	assert.Equal(t, 5, res[0].Blocks)
	m := w.Metrics()
	assert.Equal(t, 1, m.ReservedRequests)
	assert.Equal(t, 5, m.ReservedBlocks)
	assert.Equal(t, 5, m.ActiveBlocks)

	// The reservation takes no running slot (as in Dynamo): a new
	// request runs while it waits for Activate.
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(3000, 4), MaxTokens: 1}, Release))
	now = driveAny(t, w, &r, now, true)
	_, done := r.completion(3)
	assert.True(t, done)

	require.True(t, w.Activate(now, 2))
	assert.False(t, w.Activate(now, 2))
	driveAny(t, w, &r, now, true)
	c, ok := r.completion(2)
	require.True(t, ok)
	assert.Equal(t, 4, c.OutputTokens)
	var idx []int
	for _, tk := range r.tokens {
		if tk.RequestID == 2 {
			idx = append(idx, tk.Index)
		}
	}
	assert.Equal(t, []int{1, 2, 3}, idx, "token 0 came from the prefill side")
	_, done = r.completion(3)
	assert.True(t, done)
	m = w.Metrics()
	assert.Zero(t, m.ReservedRequests)
	assert.Zero(t, m.ActiveBlocks)
}

func TestSGLang_BootstrapTimeoutRejects(t *testing.T) {
	w := newWorker(t, sglangArgs(32, asPrefill, func(a *Args) { a.HandoffSessionTimeoutMs = 50 }))
	var r record
	require.NoError(t, w.Submit(10, Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 1}, Hold))
	_, ok := w.workWake()
	assert.False(t, ok, "a prefill waiting for its decode side is not work")
	assert.Equal(t, 1, w.Metrics().Waiting)
	at, ok := w.NextWake()
	require.True(t, ok)
	assert.Equal(t, 60.0, at, "the session bound counts from submit")
	driveAny(t, w, &r, 10, true)
	require.Len(t, r.rejections, 1)
	rj := r.rejections[0]
	assert.Equal(t, RejectHandoffTimeout, rj.Code)
	assert.Equal(t, 60.0, rj.At)
	assert.Contains(t, rj.Reason, "handoff_session_timeout_ms")
	assert.Zero(t, w.Passes(), "nothing was computed")
	assert.Empty(t, r.eventsOf(EventHoldStarted))
	assert.False(t, w.DestinationReady(70, 1, 12), "too late")
	m := w.Metrics()
	assert.Zero(t, m.Waiting)
	assert.Zero(t, m.ActiveBlocks)
}

func TestSGLang_LastRunningStallsUntilRelease(t *testing.T) {
	// 5 pages: a held 8-token prefill keeps 2, and a decode that needs 4
	// pages in the end stalls on the last one. It is never retracted (it
	// is the last running request); it waits, parked, for the release.
	w := newWorker(t, sglangArgs(5))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1}, Hold))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(50, 8), MaxTokens: 9}, Release))
	now := driveAny(t, w, &r, 0, false)
	_, done := r.completion(2)
	require.False(t, done)
	_, ok := w.workWake()
	assert.False(t, ok, "nothing can run until the hold ends")
	assert.Empty(t, r.eventsOf(EventPreempted))
	m := w.Metrics()
	assert.Equal(t, 5, m.ActiveBlocks)
	assert.Equal(t, 1, m.Running)

	require.True(t, w.ReleaseHeld(now+5, 1, Transferred))
	driveAny(t, w, &r, now+5, true)
	c, done := r.completion(2)
	require.True(t, done)
	assert.Equal(t, 9, c.OutputTokens)
	assert.Zero(t, w.Metrics().ActiveBlocks)
}

func TestSGLang_RetractsChunkedPrefillFirst(t *testing.T) {
	// Two decoding requests and a long prompt being prefilled in 8-token
	// chunks share 7 pages. When the decodes need pages the chunked
	// prefill, with no output yet, is the one retracted (its chunks stay
	// in the tree, unlocked, for the decodes to evict or for it to reuse),
	// and it completes once the decodes are done.
	w := newWorker(t, sglangArgs(7, func(a *Args) {
		a.SGLang.ChunkedPrefillSize = 8
		a.SGLang.ClipMaxNewTokens = 1
		a.SGLang.ScheduleConservativeness = 0
	}))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 3), MaxTokens: 8}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(50, 3), MaxTokens: 8}, Release))
	now := stepOnce(t, w, &r, 0).End
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(500, 24), MaxTokens: 1}, Release))
	driveAny(t, w, &r, now, true)
	pre := r.eventsOf(EventPreempted)
	require.NotEmpty(t, pre)
	assert.Equal(t, uint64(3), pre[0].RequestID)
	require.Len(t, r.completions, 3)
	c, _ := r.completion(3)
	assert.Equal(t, 1, c.Preemptions)
	assert.Zero(t, w.Metrics().ActiveBlocks)
}
