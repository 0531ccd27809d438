package engine

import (
	"testing"

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
