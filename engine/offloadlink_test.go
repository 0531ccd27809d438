package engine

import (
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hashes(from, n int) []kv.SeqHash {
	hs := make([]kv.SeqHash, n)
	for i := range hs {
		hs[i] = kv.SeqHash(from + i)
	}
	return hs
}

// landedAt advances l to each time of at in turn and returns how many of
// its blocks have landed by each.
func landedAt(l *offloadLink, at ...float64) []int {
	out := make([]int, len(at))
	for i, t := range at {
		l.advance(t)
		out[i] = len(readyHashes(l))
	}
	return out
}

// readyHashes is the blocks of l's landed batches, in order.
func readyHashes(l *offloadLink) []kv.SeqHash {
	var hs []kv.SeqHash
	for _, b := range l.ready {
		hs = append(hs, b.hashes...)
	}
	return hs
}

func TestOffloadLink_BatchesShareBandwidth(t *testing.T) {
	// 8 blocks at 1 ms each. One batch of 32: all land together at 8 ms.
	l := newOffloadLink(1, 32, 32)
	l.send(0, hashes(1, 8))
	assert.Equal(t, []int{0, 0, 8}, landedAt(l, 4, 7.99, 8))
	require.NoError(t, l.audit())

	// Batches of 1, one under way at a time: one block a ms, in order.
	l = newOffloadLink(1, 1, 1)
	l.send(0, hashes(1, 8))
	assert.Equal(t, []int{1, 4, 4, 8}, landedAt(l, 1, 4, 4.5, 8))
	assert.Equal(t, hashes(1, 8), readyHashes(l))
	assert.InDelta(t, 8.0, l.ready[7].at, 1e-9, "each batch lands at its own time")

	// Batches of 2, two under way sharing the link: each pair takes 4 ms
	// at half the bandwidth.
	l = newOffloadLink(1, 2, 2)
	l.send(0, hashes(1, 8))
	assert.Equal(t, []int{0, 4, 4, 8}, landedAt(l, 3.99, 4, 7.99, 8))

	// A batch sent while as many as batch are under way waits for one to
	// land: the first 4 blocks (two batches of 2, under way together)
	// land at 4 ms, the batch sent at 2 ms starts then, alone, and lands
	// at 6 ms.
	l = newOffloadLink(1, 2, 2)
	l.send(0, hashes(1, 4))
	l.send(2, hashes(10, 2))
	require.NoError(t, l.audit())
	assert.Equal(t, []int{0, 4, 4, 6}, landedAt(l, 3.99, 4, 5.99, 6))

	// A batch sent while another is under way, with room, shares the link
	// from then: the first (2 blocks, 1 done alone by 1 ms) and the second
	// (1 block) go at half speed; both land at 3 ms.
	l = newOffloadLink(1, 2, 2)
	l.send(0, hashes(1, 2))
	l.send(1, hashes(10, 1))
	assert.Equal(t, []int{0, 3}, landedAt(l, 2.99, 3))
	assert.Equal(t, []kv.SeqHash{1, 2, 10}, readyHashes(l))

	// A block is in flight until taken.
	assert.Len(t, l.inflight, 3)
	require.NoError(t, l.audit())
	var took []float64
	l.take(func(at float64, _ []kv.SeqHash) { took = append(took, at) })
	assert.Equal(t, []float64{3, 3}, took)
	assert.Empty(t, l.inflight)
	require.NoError(t, l.audit())
}

// evictAll runs P1 then P2 (4 full blocks and a token each) on a 12-block
// pool, then submits at evictAt a prompt that takes the whole pool (request
// 3), and steps the worker once at evictAt: request 3's allocation evicts
// P1's and P2's 8 blocks (P1's first: it is the least recently used).
func evictAll(t *testing.T, a Args) (w *Worker, r *record, evictAt float64) {
	t.Helper()
	w = newWorker(t, a)
	r = &record{}
	p1, p2 := seqTokens(100, 17), seqTokens(300, 17)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: p1, MaxTokens: 2}, Release))
	now := drive(t, w, r, 0)
	require.NoError(t, w.Submit(now, Request{ID: 2, Tokens: p2, MaxTokens: 2}, Release))
	evictAt = drive(t, w, r, now)
	require.NoError(t, w.Submit(evictAt, Request{ID: 3, Tokens: seqTokens(5000, 45), MaxTokens: 2}, Release))
	if out := w.Step(evictAt); out != nil {
		r.add(out)
	}
	checkWorker(t, w)
	return w, r, evictAt
}

// returnAfterEviction is evictAll, then P1 again after wait ms. It returns
// P1's second completion, request 3's, and the worker.
func returnAfterEviction(t *testing.T, a Args, wait float64) (p1, evicting Completion, _ *Worker) {
	t.Helper()
	w, r, evictAt := evictAll(t, a)
	now := drive(t, w, r, evictAt)
	back := max(now, evictAt+wait)
	require.NoError(t, w.Submit(back, Request{ID: 4, Tokens: seqTokens(100, 17), MaxTokens: 2}, Release))
	drive(t, w, r, back)
	checkWorker(t, w)
	p1, ok := r.completion(4)
	require.True(t, ok)
	evicting, ok = r.completion(3)
	require.True(t, ok)
	return p1, evicting, w
}

// slowOffload is a 12-block pool with a host tier, 1 MB of KV per token
// and 0.001 GB/s to the host tier: a 4-token block takes 4000 ms to
// offload, onboarding none.
func slowOffload(batch int) Args {
	return smallArgs(12, func(a *Args) {
		a.NumG2Blocks = 32
		a.KVBytesPerToken = intp(1_000_000)
		a.BandwidthG2ToG1 = new(0.0)
		a.BandwidthG1ToG2 = new(0.001)
		a.OffloadBatchSize = batch
	})
}

func TestVLLM_OffloadHoldsGPUSlot(t *testing.T) {
	// Offloaded at once (bandwidth 0): the evicted slots are free at
	// once, and request 3 runs at evictAt.
	instant := slowOffload(0)
	instant.BandwidthG1ToG2 = new(0.0)
	c1, c3, _ := returnAfterEviction(t, instant, 100)
	assert.Equal(t, 16, c1.CachedTokens)

	// 8 blocks at 4 s each in one batch land together at 32 s: until
	// then their slots stay taken, request 3 lacks them, and the worker,
	// with nothing else to do, wakes at the landing.
	w, _, evictAt := evictAll(t, slowOffload(0))
	m := w.Metrics()
	assert.Equal(t, 8, m.ActiveBlocks, "8 slots lent to the copy; request 3 gave back the 4 free ones it took")
	at, ok := w.NextWake()
	require.True(t, ok, "the worker waits for the copy to land")
	assert.InDelta(t, evictAt+32_000, at, 1e-6)

	// Request 3's first token comes later by the copy's 32 s. P1, back
	// after 20 s, waits behind it and finds its blocks in the tier.
	d1, d3, w := returnAfterEviction(t, slowOffload(0), 20_000)
	ttft := func(c Completion) float64 { return c.FirstTokenAt - c.Arrival }
	assert.InDelta(t, 32_000, ttft(d3)-ttft(c3), 1e-6)
	assert.Equal(t, 16, d1.CachedTokens, "P1 waited for the copy that made room, then found its blocks")
	assert.EqualValues(t, 4, w.Metrics().G2Onboarded)
}

func TestVLLM_OffloadBatchSizeDelaysVisibility(t *testing.T) {
	// Batches of 1, one at a time: P1's 4 blocks, evicted first, land by
	// 16 s. In one batch of 32 the 8 blocks land together at 32 s; so do
	// two batches of 4 under way together, sharing the link.
	for _, tc := range []struct {
		batch int
		want  []int
	}{{1, []int{4, 8}}, {32, []int{0, 8}}, {4, []int{0, 8}}} {
		w, _, evictAt := evictAll(t, slowOffload(tc.batch))
		l := w.Scheduler().(*VLLM).pool.link
		assert.Equal(t, tc.want, landedAt(l, evictAt+18_000, evictAt+32_000), "batch %d", tc.batch)
	}
}

func TestVLLM_LowerTierCopyTimeDelaysHits(t *testing.T) {
	// A 2-block host tier, filled at once, keeps the first two of P's
	// blocks; the other two are found on disk or in object storage only
	// once their copy from the host tier has landed. At 0.001 GB/s a 4 MB
	// block takes 4 s: P, back a few ms later, finds the host tier's two.
	for _, tc := range []struct {
		name string
		set  func(a *Args, bw float64)
	}{
		{"disk", func(a *Args, bw float64) { a.NumG3Blocks, a.BandwidthG2ToG3 = 32, new(bw) }},
		{"object", func(a *Args, bw float64) { a.EnableG4Storage, a.BandwidthG2ToG4 = true, new(bw) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g2Args(2, 1)
			a.BandwidthG1ToG2 = new(0.0)
			tc.set(&a, 0)
			_, c, _ := evictThenReturn(t, a)
			assert.Equal(t, 16, c.CachedTokens, "copied down at once")

			a = g2Args(2, 1)
			a.BandwidthG1ToG2 = new(0.0)
			tc.set(&a, 0.001)
			_, c, w := evictThenReturn(t, a)
			assert.Equal(t, 8, c.CachedTokens, "the copies below the host tier are still on their way")
			m := w.Metrics()
			assert.Zero(t, m.G3Onboarded+m.G4Onboarded)
			checkWorker(t, w)
		})
	}
}

// TestVirtual_WakesAtOffloadLanding: on a virtual clock, a worker whose
// only request waits for slots lent to a copy has no pass and no input to
// wake it but the copy's landing. The run neither stalls there nor skips
// it: the request runs from the landing, and nothing stays lent.
func TestVirtual_WakesAtOffloadLanding(t *testing.T) {
	w := newWorker(t, slowOffload(0))
	v := NewVirtual(w)
	var r record
	v.OnOutput = func(_ int, out *Output) {
		r.add(out)
		checkWorker(t, w)
	}
	v.Schedule(0, 0, &Submit{Request: Request{ID: 1, Tokens: seqTokens(100, 17), MaxTokens: 2}, Policy: Release})
	v.Schedule(1000, 0, &Submit{Request: Request{ID: 2, Tokens: seqTokens(300, 17), MaxTokens: 2}, Policy: Release})
	v.Schedule(2000, 0, &Submit{Request: Request{ID: 3, Tokens: seqTokens(5000, 45), MaxTokens: 2}, Policy: Release})
	require.NoError(t, v.Run())
	c, ok := r.completion(3)
	require.True(t, ok, "request 3 ran")
	// P1's and P2's 8 blocks, evicted at 2000 ms in one batch at 4 s a
	// block, land at 34000 ms: request 3 is admitted then.
	assert.GreaterOrEqual(t, c.FirstTokenAt, 34_000.0)
	assert.Less(t, c.FirstTokenAt, 35_000.0)
	assert.Zero(t, lentBlocks(w))
	assert.EqualValues(t, 8, w.Metrics().G2Offloaded)
}
