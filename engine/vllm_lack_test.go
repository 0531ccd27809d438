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
	var skipped, coasted int
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
		})
		// A worker whose outputs report every token does not coast.
		firstOnly := rapid.IntRange(0, 3).Draw(rt, "report") > 0
		var ws [2]*Worker
		var vs [2]*Virtual
		var recs [2]record
		var replies [2][]InputResult
		var metrics [2][]Metrics
		for i := range ws {
			w, err := New(args, contextModel{}, 3)
			if err != nil {
				rt.Fatal(err)
			}
			if firstOnly {
				w.ReportFirstTokensOnly()
			}
			ws[i], vs[i] = w, NewVirtual(w)
			vs[i].OnOutput = func(_ int, out *Output) {
				if vl := w.Scheduler().(*VLLM); vl.coastN > 0 {
					coasted++
				}
				recs[i].add(out)
				metrics[i] = append(metrics[i], w.Metrics())
				checkWorker(rt, w)
			}
			vs[i].OnInput = func(r InputResult) {
				replies[i] = append(replies[i], r)
				metrics[i] = append(metrics[i], w.Metrics())
				checkWorker(rt, w)
			}
		}
		ws[1].Scheduler().(*VLLM).walkAlways = true
		ws[1].Scheduler().(*VLLM).canCoast = false

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
				in = Submit{Request: Request{ID: uint64(n), Tokens: toks, MaxTokens: rapid.IntRange(1, 80).Draw(rt, "max_tokens")}, Policy: pol}
				n++
			case 3:
				in = ReleaseHeld{ID: id("release"), Outcome: rapid.SampledFrom([]Outcome{Transferred, Aborted}).Draw(rt, "outcome")}
			default:
				in = Cancel{ID: id("cancel")}
			}
			for _, v := range vs {
				v.Schedule(at, 0, in)
			}
		}
		for i, v := range vs {
			if err := v.Run(); err != nil {
				rt.Fatalf("worker %d: %v", i, err)
			}
		}
		require.Equal(rt, recs[1].outs, recs[0].outs, "outputs")
		require.Equal(rt, replies[1], replies[0], "inputs' effects")
		require.Equal(rt, metrics[1], metrics[0], "metrics")
		if vl := ws[0].Scheduler().(*VLLM); vl.admitLack.s != nil || vl.pool.released > 0 {
			skipped++
		}
	})
	require.Positive(t, skipped, "no request ever lacked blocks")
	require.Positive(t, coasted, "no request ever coasted")
}
