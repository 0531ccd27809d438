package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestVLLM_ShortcutsChangeNothing runs random schedules of submissions,
// hold releases and cancellations on two prefill or aggregated workers
// alike but for their shortcuts, which one of them may not take: walking
// the prefix of a waiting request that lacked blocks only once blocks
// were released or a block of its prompt stored since, and coasting.
// Every Output, every input's effect and the metrics after each are the
// same, exactly. Small pools of shared prefixes keep requests waiting for
// blocks while holds pin them; long prompts take several passes of small
// budgets while others decode.
func TestVLLM_ShortcutsChangeNothing(t *testing.T) {
	var spared, coasted int
	rapid.Check(t, func(rt *rapid.T) {
		wt := rapid.SampledFrom([]WorkerType{WorkerPrefill, WorkerAggregated}).Draw(rt, "worker_type")
		args := smallArgs(rapid.IntRange(4, 48).Draw(rt, "blocks"), func(a *Args) {
			a.WorkerType = wt
			a.BlockSize = rapid.SampledFrom([]int{2, 4, 8, 3}).Draw(rt, "block_size")
			a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
			a.MaxNumSeqs = intp(rapid.IntRange(1, 8).Draw(rt, "seqs"))
			if rapid.Bool().Draw(rt, "budget_set") {
				a.MaxNumBatchedTokens = intp(rapid.IntRange(1, 128).Draw(rt, "budget"))
			}
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preempt")
			drawShortcutVariant(rt, a)
		})
		// A worker whose outputs report every token does not coast.
		firstOnly := rapid.IntRange(0, 3).Draw(rt, "report") > 0
		p := newShortcutPair(rt, args, firstOnly)

		n := 0
		at := 0.0
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at += rapid.Float64Range(0, 20).Draw(rt, "gap")
			var in Input
			id := func(label string) uint64 { return uint64(rapid.IntRange(0, max(0, n-1)).Draw(rt, label)) }
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
			case 0, 1, 2:
				pol := Release
				if wt == WorkerPrefill || rapid.Bool().Draw(rt, "hold") {
					pol = Hold
				}
				toks := append(seqTokens(uint32(1000*rapid.IntRange(0, 2).Draw(rt, "prefix")), rapid.IntRange(0, 24).Draw(rt, "shared")),
					seqTokens(uint32(100_000+100*n), rapid.IntRange(1, 24).Draw(rt, "own"))...)
				in = &Submit{Request: Request{ID: uint64(n), Tokens: toks, MaxTokens: rapid.IntRange(1, 80).Draw(rt, "max_tokens")}, Policy: pol}
				n++
			case 3:
				in = ReleaseHeld{ID: id("release"), Outcome: rapid.SampledFrom([]Outcome{Transferred, Aborted}).Draw(rt, "outcome")}
			default:
				in = Cancel{ID: id("cancel")}
			}
			p.schedule(at, in)
		}
		p.runAndCompare(rt)
		coasted += p.coasted
		spared += int(p.ws[0].Scheduler().(*VLLM).sparedWalks)
	})
	require.Positive(t, spared, "the lack watch never spared a walk")
	require.Positive(t, coasted, "no request ever coasted")
}

// TestVLLM_LackingDestinationNotWalkedAfterAStore has a decode worker
// store the prompt of a request it runs while a destination that shares
// none of it waits for more blocks than are free: the store cannot
// lengthen the destination's prefix hits, and fewer blocks are free than
// it needs, so it is not walked again (the walk would find it lacking).
// The counts alone would have walked it: the store is its first since.
func TestVLLM_LackingDestinationNotWalkedAfterAStore(t *testing.T) {
	w := newWorker(t, decodeArgs(20))
	v := w.Scheduler().(*VLLM)
	var r record
	require.NoError(t, w.Reserve(0, Request{ID: 1, Tokens: seqTokens(100, 24), MaxTokens: 40}))
	require.NoError(t, w.Reserve(0, Request{ID: 2, Tokens: seqTokens(200, 40), MaxTokens: 3}))
	require.NoError(t, w.Reserve(0, Request{ID: 3, Tokens: seqTokens(300, 32), MaxTokens: 3}))
	drive(t, w, &r, 0)
	require.Equal(t, 1, w.Metrics().Waiting, "the third destination waits for blocks")
	stores, spared := v.pool.stores, v.sparedWalks

	require.True(t, w.Activate(1, 1))
	step(t, w, &r, 1)
	require.Greater(t, v.pool.stores, stores, "the first pass stores the activated prompt")
	assert.Greater(t, v.sparedWalks, spared, "the waiting destination is not walked after the store")
	assert.Equal(t, 1, w.Metrics().Waiting)
	checkWorker(t, w)
}
