package engine

import (
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storedBlocks lists the blocks of every Stored event in r, in order.
func storedBlocks(r *record) []kv.Block {
	var out []kv.Block
	for _, e := range r.kvEvents {
		if e.Kind == kv.Stored {
			out = append(out, e.Blocks...)
		}
	}
	return out
}

func TestSGLang_PagesCachedAsTheyFill(t *testing.T) {
	w := newWorker(t, sglangArgs(64))
	var r record
	prompt := seqTokens(100, 16)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: prompt, MaxTokens: 40}, Release))
	now := 0.0
	for range 3 { // the extend pass and two decode passes
		now = stepOnce(t, w, &r, now).End
	}
	_, seqs := kv.BlockHashes(prompt, 4, nil, nil)
	stored := storedBlocks(&r)
	require.Len(t, stored, 4, "the prompt's pages are announced while the request runs")
	for i, b := range stored {
		assert.Equal(t, seqs[i], b.Hash)
	}

	// Two more decodes fill the first page of generated tokens (KV covers
	// the prompt and the first four outputs), which is announced at once.
	for range 2 {
		now = stepOnce(t, w, &r, now).End
	}
	seq := append([]uint32(nil), prompt...)
	for _, tk := range r.tokens {
		seq = append(seq, tk.Token)
	}
	_, seqs = kv.BlockHashes(seq[:20], 4, nil, nil)
	stored = storedBlocks(&r)
	require.Len(t, stored, 5)
	assert.Equal(t, seqs[4], stored[4].Hash)

	// A concurrent request with the same prompt hits the running one's KV.
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: prompt, MaxTokens: 1}, Release))
	out := stepOnce(t, w, &r, now)
	assert.Equal(t, []uint64{2}, tokenIDs(out))
	assert.Equal(t, 4, out.PrefillTokens, "only the last prompt page is recomputed")
	c, ok := r.completion(2)
	require.True(t, ok)
	assert.Equal(t, 12, c.CachedTokens)
	_, done := r.completion(1)
	assert.False(t, done, "request 1 is still running")
}

func TestSGLang_RetractedPrefixStaysCached(t *testing.T) {
	w := newWorker(t, sglangArgs(11, func(a *Args) { a.SGLang.ClipMaxNewTokens = 4 }))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 24}, Release))
	require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(500, 16), MaxTokens: 24}, Release))
	now, retractedAt, length := 0.0, -1, 0
	for i := 0; retractedAt < 0; i++ {
		require.Less(t, i, 50, "request 2 was never retracted")
		out := stepOnce(t, w, &r, now)
		now = max(now, out.End)
		for _, e := range out.Events {
			if e.Kind == EventPreempted && e.RequestID == 2 {
				retractedAt = i
			}
		}
	}
	assert.Equal(t, 5, retractedAt, "retracted in the fifth decode pass, after the extend pass")
	g := sgOf(w)
	r2 := g.req(2)
	require.NotNil(t, r2)
	length = r2.length
	m := w.Metrics()
	assert.Positive(t, m.InactiveBlocks, "the retracted request's computed pages stay in the tree")
	cachedPages, _ := g.prefix(r2)
	assert.Positive(t, cachedPages)

	// Its readmission recomputes only what is no longer cached.
	for i := 0; ; i++ {
		require.Less(t, i, 100, "request 2 was never readmitted")
		hits, _ := g.prefix(r2)
		out := stepOnce(t, w, &r, now)
		now = max(now, out.End)
		if out.PrefillTokens > 0 {
			// Request 1's growth evicted the deeper pages; what is left of
			// the prefix is reused and only the rest is recomputed.
			assert.Positive(t, hits, "part of the prefix survived")
			assert.Equal(t, length-hits*4, out.PrefillTokens)
			break
		}
	}
	driveAll(t, w, &r, now)
	for _, id := range []uint64{1, 2} {
		c, ok := r.completion(id)
		require.True(t, ok)
		assert.Equal(t, 24, c.OutputTokens)
	}
}

func TestSGLang_AdmissionChargesLockedPrefix(t *testing.T) {
	w := newWorker(t, sglangArgs(10))
	var r record
	warm := seqTokens(100, 33)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: warm, MaxTokens: 1}, Release))
	now := driveAll(t, w, &r, 0)
	m := w.Metrics()
	require.Equal(t, 8, m.InactiveBlocks)
	require.Equal(t, 2, m.FreeBlocks)

	// A reuses the 8 cached pages, which admission must count as taken once
	// A locks them: nothing is left for B.
	a := append(append([]uint32(nil), warm[:32]...), 7, 7, 7, 7)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: a, MaxTokens: 4}, Release))
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(900, 4), MaxTokens: 4}, Release))
	out := stepOnce(t, w, &r, now)
	assert.Equal(t, []uint64{2}, tokenIDs(out), "B waits for A")
	driveAll(t, w, &r, out.End)
	assert.Empty(t, r.eventsOf(EventPreempted), "nobody is retracted")
	require.Len(t, r.completions, 3)
}

func TestSGLang_ReserveChargesLockedPrefix(t *testing.T) {
	// The destination twin of TestSGLang_AdmissionChargesLockedPrefix: a
	// reservation reusing 8 evictable pages takes them from the budget.
	w := newWorker(t, sglangArgs(10, func(a *Args) { a.WorkerType = WorkerDecode }))
	var r record
	warm := seqTokens(100, 33)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: warm, MaxTokens: 1}, Release))
	now := driveAll(t, w, &r, 0)
	require.Equal(t, 8, w.Metrics().InactiveBlocks)
	a := append(append([]uint32(nil), warm[:32]...), 7, 7, 7, 7)
	require.NoError(t, w.Reserve(now, Request{ID: 2, Tokens: a, MaxTokens: 4}))
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(900, 4), MaxTokens: 4}, Release))
	out := w.Step(now)
	require.NotNil(t, out)
	r.add(out)
	assert.Len(t, r.eventsOf(EventDecodeReserved), 1)
	assert.Empty(t, out.Tokens, "request 3 waits: the reservation took the cached pages it reuses")
}

func TestSGLang_PreemptedBlocksCountsReleasedPages(t *testing.T) {
	// Two running requests share a cached 3-page prefix. Retracting one
	// releases its own pages; the prefix the other still locks stays in
	// use and is not counted.
	w := newWorker(t, sglangArgs(64))
	var r record
	shared := seqTokens(100, 12)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: shared, MaxTokens: 1}, Release))
	now := driveAll(t, w, &r, 0)
	p1 := append(append([]uint32(nil), shared...), 1, 1, 1, 1, 1)
	p2 := append(append([]uint32(nil), shared...), 2, 2, 2, 2, 2)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: p1, MaxTokens: 30}, Release))
	require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: p2, MaxTokens: 30}, Release))
	for range 3 {
		now = stepOnce(t, w, &r, now).End
	}
	g := sgOf(w)
	v := g.req(3)
	require.Equal(t, sgRunning, v.state)
	held := v.depth + len(v.pages)
	before := g.cache.active()
	var out Output
	g.retract(v, now, &out)
	require.Len(t, out.Events, 1)
	e := out.Events[0]
	assert.Equal(t, EventPreempted, e.Kind)
	assert.Equal(t, before-g.cache.active(), e.Blocks, "the pages the retraction released")
	assert.Equal(t, held-3, e.Blocks, "all but the 3 shared pages")
	checkWorker(t, w)
}

func TestSGLang_ReleaseHeldRejectsOtherOutcomes(t *testing.T) {
	w := newWorker(t, sglangArgs(16, func(a *Args) { a.SGLang.OptimisticPrefill = true }, asPrefill))
	var r record
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1}, Hold))
	now := drive(t, w, &r, 0)
	require.Equal(t, 1, w.Metrics().HeldRequests)
	g := sgOf(w)
	var events []Event
	for _, o := range []Outcome{0, Aborted + 1, 255} {
		assert.False(t, g.ReleaseHeld(now, 1, o, &events), "outcome %d", o)
	}
	assert.Empty(t, events)
	assert.Equal(t, 1, w.Metrics().HeldRequests)
	assert.True(t, g.ReleaseHeld(now, 1, Transferred, &events))
	assert.Zero(t, w.Metrics().HeldRequests)
}

// TestSGLang_ConservativenessRange: the initial ratio is 0.7 × the
// conservativeness, which Dynamo (and so mocker) takes in [0, 1].
func TestSGLang_ConservativenessRange(t *testing.T) {
	for _, tc := range []struct {
		c, want float64
	}{
		{0, 0},
		{0.5, 0.35},
		{1, 0.7},
	} {
		g, err := NewSGLang(sglangArgs(8, func(a *Args) { a.SGLang.ScheduleConservativeness = tc.c }), nil, 1)
		require.NoError(t, err, "conservativeness %g", tc.c)
		assert.InDelta(t, tc.want, g.NewTokenRatio(), 1e-12, "conservativeness %g", tc.c)
		assert.InDelta(t, 0.14*tc.want, g.minRatio, 1e-12)
	}
	for _, c := range []float64{1.2, 2, 10} {
		_, err := NewSGLang(sglangArgs(8, func(a *Args) { a.SGLang.ScheduleConservativeness = c }), nil, 1)
		var ae *ArgError
		require.ErrorAs(t, err, &ae, "conservativeness %g", c)
		assert.Equal(t, "sglang.schedule_conservativeness", ae.Field)
	}
}

func TestEngines_HugeMaxTokens(t *testing.T) {
	const huge = 1 << 62
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(8))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: huge}, Release))
			var tokens []uint32
			switch s := w.Scheduler().(type) {
			case *VLLM:
				tokens = s.seq(1).tail
			case *SGLang:
				tokens = s.req(1).tail
			}
			assert.LessOrEqual(t, cap(tokens), 8*4+1, "token storage is bounded by what the pool can hold")
			driveAll(t, w, &r, 0)
			if e.name == "sglang" {
				require.Len(t, r.rejections, 1)
				assert.Equal(t, RejectNeverFits, r.rejections[0].Code)
				return
			}
			c, ok := r.completion(1)
			require.True(t, ok)
			assert.True(t, c.Truncated, "stopped by the pool, not by max_tokens")
			assert.Positive(t, c.OutputTokens)
		})
	}
	t.Run("vllm max_model_len", func(t *testing.T) {
		w := newWorker(t, smallArgs(64, func(a *Args) { a.MaxModelLen = intp(20) }))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: huge}, Release))
		assert.LessOrEqual(t, cap(sgVLLM(w).seq(1).tail), 20)
		driveAll(t, w, &r, 0)
		c, ok := r.completion(1)
		require.True(t, ok)
		assert.True(t, c.Truncated)
		assert.Equal(t, 12, c.OutputTokens, "stopped at max_model_len")
	})
}

func sgVLLM(w *Worker) *VLLM { return w.Scheduler().(*VLLM) }

func TestSGLang_AdmissionChargesUnusedPageTails(t *testing.T) {
	// Six pages of 4 tokens, no growth reservation (conservativeness 0).
	// Request 1 runs; request 2 needs its page-rounded prompt plus one
	// output token. The budget is the 4 or 3 pages left minus the unused
	// tail of request 1's last page.
	for _, tc := range []struct {
		name           string
		running, newer int // prompt lengths
		admitted       bool
	}{
		{"full last page leaves no tail", 8, 11, true},        // 16 - 0 > 12 + 1
		{"a 3-token tail is charged", 9, 5, false},            // 12 - 3 ≤ 8 + 1
		{"the tail alone is charged, not a page", 9, 4, true}, // 12 - 3 > 4 + 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, sglangArgs(6, func(a *Args) { a.SGLang.ScheduleConservativeness = 0 }))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, tc.running), MaxTokens: 10}, Release))
			now := stepOnce(t, w, &r, 0).End
			require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: seqTokens(500, tc.newer), MaxTokens: 1}, Release))
			out := stepOnce(t, w, &r, now)
			if tc.admitted {
				assert.Equal(t, []uint64{2}, tokenIDs(out))
			} else {
				assert.Equal(t, []uint64{1}, tokenIDs(out))
			}
		})
	}
}

func TestSGLang_BootstrapQueueLeftOutOfOrder(t *testing.T) {
	// Requests leave the bootstrap queue from its middle (ready, cancelled)
	// and from its head (timed out); the queue keeps the deadlines of the
	// ones still in it, in order, and Waiting counts only those.
	w := newWorker(t, sglangArgs(64, asPrefill, func(a *Args) { a.HandoffSessionTimeoutMs = 50 }))
	var r record
	for i := range 5 {
		require.NoError(t, w.Submit(float64(10*i), Request{ID: uint64(i + 1), Tokens: seqTokens(uint32(100*i), 8), MaxTokens: 1}, Hold))
	}
	require.Equal(t, 5, w.Metrics().Waiting)
	require.True(t, w.DestinationReady(41, 2, 8))
	require.True(t, w.Cancel(41, 4))
	assert.False(t, w.DestinationReady(41, 4, 8), "cancelled")
	require.True(t, w.DestinationReady(41, 1, 8))
	_, ok := w.workWake()
	require.True(t, ok, "the ready prefills can run")
	now := drive(t, w, &r, 41)
	assert.Len(t, r.eventsOf(EventHoldStarted), 2)
	assert.Equal(t, 2, w.Metrics().Waiting, "requests 3 and 5 still wait")
	at, ok := sgOf(w).bootDeadline()
	require.True(t, ok)
	assert.Equal(t, 70.0, at, "request 3 is the oldest left")
	driveAll(t, w, &r, now)
	var expired []uint64
	for _, rj := range r.rejections {
		assert.Equal(t, RejectHandoffTimeout, rj.Code)
		assert.Equal(t, float64(10*(rj.RequestID-1))+50, rj.At)
		expired = append(expired, rj.RequestID)
	}
	assert.Equal(t, []uint64{3, 5}, expired)
	assert.Zero(t, w.Metrics().Waiting)
	g := sgOf(w)
	assert.Empty(t, g.boot[g.bootHead:])
	// A recycled request entering the queue again gets a live entry.
	require.NoError(t, w.Submit(200, Request{ID: 3, Tokens: seqTokens(1, 8), MaxTokens: 1}, Hold))
	assert.Equal(t, 1, w.Metrics().Waiting)
	at, ok = g.bootDeadline()
	require.True(t, ok)
	assert.Equal(t, 250.0, at)
}
