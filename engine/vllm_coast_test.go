package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestVLLM_CoastingChangesNothing runs random schedules of reservations,
// activations, cancellations and destination cancels on two decode
// workers alike but for their shortcuts, which one of them may not take
// (coasting, and a destination that lacked blocks not walked again until
// blocks are released or a block of its prompt stored): every
// Output, every input's effect and the metrics after each are the same,
// exactly. Small pools preempt coasting requests, budgets about the size
// of the running set leave some requests without a step, short
// max_model_len and max_tokens end requests while coasting would go on. The
// timing model reads every figure a pass gives it (contextModel).
func TestVLLM_CoastingChangesNothing(t *testing.T) {
	var coasted, preemptions int
	rapid.Check(t, func(rt *rapid.T) {
		bs := rapid.SampledFrom([]int{2, 4, 8, 16, 3, 128}).Draw(rt, "block_size")
		args := smallArgs(rapid.IntRange(4, 64).Draw(rt, "blocks"), func(a *Args) {
			a.WorkerType = WorkerDecode
			a.BlockSize = bs
			a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
			a.MaxNumSeqs = intp(rapid.IntRange(1, 8).Draw(rt, "seqs"))
			// Budgets about the size of the running set: the steps asked
			// of a pass exceed them, or fit them exactly.
			switch rapid.IntRange(0, 2).Draw(rt, "budget_kind") {
			case 0:
				a.MaxNumBatchedTokens = intp(rapid.IntRange(1, 10).Draw(rt, "budget"))
			case 1:
				a.MaxNumBatchedTokens = intp(rapid.IntRange(1, 256).Draw(rt, "budget"))
			}
			if rapid.Bool().Draw(rt, "max_len_set") {
				a.MaxModelLen = intp(rapid.IntRange(8, 200).Draw(rt, "max_len"))
			}
			a.PreemptionMode = rapid.SampledFrom([]PreemptionMode{PreemptLIFO, PreemptFIFO}).Draw(rt, "preempt")
			a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
		})
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
			w.ReportFirstTokensOnly()
			ws[i], vs[i] = w, NewVirtual(w)
			vs[i].OnOutput = func(_ int, out *Output) {
				recs[i].add(out)
				metrics[i] = append(metrics[i], w.Metrics())
				checkWorker(rt, w)
				if vl := w.Scheduler().(*VLLM); vl.coastN > 0 {
					coasted++
				}
			}
			vs[i].OnInput = func(r InputResult) {
				replies[i] = append(replies[i], r)
				metrics[i] = append(metrics[i], w.Metrics())
				checkWorker(rt, w)
			}
		}
		ws[1].Scheduler().(*VLLM).canCoast = false
		ws[1].Scheduler().(*VLLM).walkAlways = true

		n := 0
		at := 0.0
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at += rapid.Float64Range(0, 30).Draw(rt, "gap")
			var in Input
			id := func(label string) uint64 { return uint64(rapid.IntRange(0, max(0, n-1)).Draw(rt, label)) }
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				in = Reserve{Request: Request{ID: uint64(n),
					Tokens:    seqTokens(uint32(1000*rapid.IntRange(0, 3).Draw(rt, "prefix")), rapid.IntRange(1, 200).Draw(rt, "prompt")),
					MaxTokens: rapid.IntRange(1, 300).Draw(rt, "max_tokens")}}
				n++
			case 2, 3:
				in = Activate{ID: id("activate")}
			case 4:
				in = Cancel{ID: id("cancel")}
			default:
				in = CancelDestination{ID: id("cancel_dest")}
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
		for _, m := range metrics[0] {
			preemptions = max(preemptions, int(m.Preemptions))
		}
	})
	require.Positive(t, coasted, "no request ever coasted")
	require.Positive(t, preemptions, "no run preempted")
}

// contextModel is a timing model whose every input moves its result, so
// a pass's timing shows its batch and context length.
type contextModel struct{}

func (contextModel) PrefillMs(batch int, meanISL, meanPrefix float64) float64 {
	return float64(batch)*0.5 + meanISL*0.03 - meanPrefix*0.01
}

func (contextModel) DecodeMs(batch int, active, total, contextLen float64) float64 {
	return 1 + float64(batch)*0.25 + active/total + contextLen*0.013
}
