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
	var coasted, preemptions, spared int
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
			drawShortcutVariant(rt, a)
		})
		p := newShortcutPair(rt, args, true)

		n := 0
		at := 0.0
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at += rapid.Float64Range(0, 30).Draw(rt, "gap")
			var in Input
			id := func(label string) uint64 { return uint64(rapid.IntRange(0, max(0, n-1)).Draw(rt, label)) }
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				in = &Reserve{Request: Request{ID: uint64(n),
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
			p.schedule(at, in)
		}
		p.runAndCompare(rt)
		coasted += p.coasted
		spared += int(p.ws[0].Scheduler().(*VLLM).sparedWalks)
		for _, m := range p.metrics[0] {
			preemptions = max(preemptions, int(m.Preemptions))
		}
	})
	require.Positive(t, coasted, "no request ever coasted")
	require.Positive(t, preemptions, "no run preempted")
	require.Positive(t, spared, "the lack watch never spared a destination's walk")
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

// TestVLLM_NoCoastingWithChunkedPrefillOff replays the schedule that showed
// why a worker with chunked prefill off must not coast: with a budget of 3,
// a recompute whose last 3 prompt tokens do not fit what a decoding
// request before it leaves is passed over while a request after it runs;
// charged first, that request would keep the recompute waiting a pass
// longer. The worker with its shortcuts and the one without must agree.
func TestVLLM_NoCoastingWithChunkedPrefillOff(t *testing.T) {
	args := budget3Decode(56, 8, func(a *Args) {
		a.MaxModelLen = intp(157)
		a.EnableChunkedPrefill = false
	})
	schedule := []scheduled{
		{1, &Reserve{Request: Request{ID: 0, Tokens: seqTokens(0, 97), MaxTokens: 1}}},
		{1, &Reserve{Request: Request{ID: 1, Tokens: seqTokens(0, 1), MaxTokens: 1}}},
		{1, &Reserve{Request: Request{ID: 2, Tokens: seqTokens(0, 25), MaxTokens: 17}}},
		{1, Cancel{ID: 1}},
		{1.55859375, Activate{ID: 2}},
		{3.079249146111093e-13, &Reserve{Request: Request{ID: 3, Tokens: seqTokens(0, 4), MaxTokens: 2}}},
		{0.5994506692566759, &Reserve{Request: Request{ID: 4, Tokens: seqTokens(1000, 200), MaxTokens: 202}}},
		{2.10972691089568e-65, Activate{ID: 4}},
		{2.7132289017949716e-281, Cancel{ID: 3}},
		{1.2901470313039455e-34, &Reserve{Request: Request{ID: 5, Tokens: seqTokens(0, 1), MaxTokens: 56}}},
		{1.71661376953125e-05, &Reserve{Request: Request{ID: 6, Tokens: seqTokens(1000, 109), MaxTokens: 300}}},
		{12.140625, &Reserve{Request: Request{ID: 7, Tokens: seqTokens(0, 156), MaxTokens: 76}}},
		{2.625, &Reserve{Request: Request{ID: 8, Tokens: seqTokens(1000, 6), MaxTokens: 2}}},
		{6.16084280561282e-200, &Reserve{Request: Request{ID: 9, Tokens: seqTokens(2000, 4), MaxTokens: 153}}},
		{0.7255859375, Activate{ID: 2}},
		{5.686853330223069e-31, Cancel{ID: 8}},
		{0.11191122774891582, &Reserve{Request: Request{ID: 10, Tokens: seqTokens(2000, 2), MaxTokens: 1}}},
		{0.36594972035617235, Activate{ID: 5}},
		{26.600174576541903, Cancel{ID: 0}},
		{3.7435531616210938, &Reserve{Request: Request{ID: 11, Tokens: seqTokens(0, 2), MaxTokens: 18}}},
		{4.30078125, &Reserve{Request: Request{ID: 12, Tokens: seqTokens(3000, 1), MaxTokens: 8}}},
		{5.634501576423645e-08, &Reserve{Request: Request{ID: 13, Tokens: seqTokens(0, 4), MaxTokens: 191}}},
		{2.3142892307510942e-43, CancelDestination{ID: 3}},
		{0.35611974261701107, &Reserve{Request: Request{ID: 14, Tokens: seqTokens(2000, 1), MaxTokens: 173}}},
		{1.0890002604573965, Activate{ID: 6}},
	}
	p := replayShortcutPair(t, args, schedule)
	require.NotEmpty(t, p.recs[0].outs)
}

// TestVLLM_NoCoastingAfterARefund replays the schedule that showed why a
// request must not start coasting in a pass that preempted: with a budget
// of 3, a decoding request got its step only because a preemption, after
// a recomputing request before it had taken what the budget left, gave a
// step back. The next pass gave that recompute the whole budget, and the
// decoding request nothing; charged first as a coasting request, it would
// have taken a step from the recompute. The worker with its shortcuts and
// the one without must agree.
func TestVLLM_NoCoastingAfterARefund(t *testing.T) {
	args := budget3Decode(30, 16, func(a *Args) { a.EnableChunkedPrefill = true })
	schedule := []scheduled{
		{2.9886123600881547, &Reserve{Request: Request{ID: 0, Tokens: seqTokens(0, 12), MaxTokens: 13}}},
		{4.9375, Activate{ID: 0}},
		{7.68980339234792, &Reserve{Request: Request{ID: 1, Tokens: seqTokens(0, 64), MaxTokens: 8}}},
		{6.4405752742156506e-111, CancelDestination{ID: 0}},
		{1.5458984375, CancelDestination{ID: 1}},
		{8.494137974257198e-85, CancelDestination{ID: 0}},
		{2.2021767448665285e-299, Activate{ID: 1}},
		{0.5379094123565977, Activate{ID: 0}},
		{14.098476775928804, CancelDestination{ID: 0}},
		{0.7081952214379328, Activate{ID: 0}},
		{14, &Reserve{Request: Request{ID: 2, Tokens: seqTokens(3000, 1), MaxTokens: 251}}},
		{0.9364280999288894, &Reserve{Request: Request{ID: 3, Tokens: seqTokens(1000, 2), MaxTokens: 247}}},
		{1.852307921892134, &Reserve{Request: Request{ID: 4, Tokens: seqTokens(1000, 174), MaxTokens: 160}}},
		{7.022249429137446, &Reserve{Request: Request{ID: 5, Tokens: seqTokens(0, 156), MaxTokens: 13}}},
		{15.2473753397353, Activate{ID: 4}},
		{3.4378662109375, Activate{ID: 5}},
		{0.798828125, &Reserve{Request: Request{ID: 6, Tokens: seqTokens(0, 112), MaxTokens: 58}}},
		{2.862218175923778e-19, Activate{ID: 5}},
		{7.797317493896117e-07, Activate{ID: 3}},
		{0.21748007833957672, &Reserve{Request: Request{ID: 7, Tokens: seqTokens(0, 17), MaxTokens: 109}}},
		{10.140625, &Reserve{Request: Request{ID: 8, Tokens: seqTokens(2000, 1), MaxTokens: 182}}},
		{14.028110934356224, &Reserve{Request: Request{ID: 9, Tokens: seqTokens(3000, 31), MaxTokens: 202}}},
		{13.3155459075064, &Reserve{Request: Request{ID: 10, Tokens: seqTokens(2000, 2), MaxTokens: 82}}},
		{30, Activate{ID: 8}},
		{1.5802979292453683e-203, &Reserve{Request: Request{ID: 11, Tokens: seqTokens(2000, 79), MaxTokens: 188}}},
		{0.32238877814277167, Cancel{ID: 1}},
		{0.09423828125, &Reserve{Request: Request{ID: 12, Tokens: seqTokens(0, 28), MaxTokens: 28}}},
		{5.024592825667609e-19, &Reserve{Request: Request{ID: 13, Tokens: seqTokens(1000, 43), MaxTokens: 4}}},
		{0.3399976456400478, Activate{ID: 10}},
	}
	p := replayShortcutPair(t, args, schedule)
	require.Positive(t, p.coasted, "no request coasted: the schedule no longer tests coasting")
}

// budget3Decode is the decode worker the replayed schedules ran on: blocks
// blocks of blockSize tokens, no prefix caching, at most three sequences
// and three tokens a pass, FIFO preemption; then mod.
func budget3Decode(blocks, blockSize int, mod func(*Args)) Args {
	return smallArgs(blocks, func(a *Args) {
		a.WorkerType = WorkerDecode
		a.BlockSize = blockSize
		a.EnablePrefixCaching = false
		a.MaxNumSeqs = intp(3)
		a.MaxNumBatchedTokens = intp(3)
		a.PreemptionMode = PreemptFIFO
	}, mod)
}

// scheduled is one input of a replayed schedule, gap ms after the one
// before.
type scheduled struct {
	gap float64
	in  Input
}

// replayShortcutPair gives schedule to a pair of decode workers built
// from args, reporting first tokens only, and requires them to agree.
func replayShortcutPair(t *testing.T, args Args, schedule []scheduled) *shortcutPair {
	t.Helper()
	p := newShortcutPair(t, args, true)
	at := 0.0
	for _, s := range schedule {
		at += s.gap
		p.schedule(at, s.in)
	}
	p.runAndCompare(t)
	return p
}

// shortcutPair is two workers built alike from the same arguments, the
// second without the shortcuts (coasting, the lack watch), fed the same
// inputs at the same times.
type shortcutPair struct {
	ws      [2]*Worker
	vs      [2]*Virtual
	recs    [2]record
	replies [2][]InputResult
	metrics [2][]Metrics
	// coasted counts the Outputs after which a request coasted.
	coasted int
}

// drawShortcutVariant puts a's worker on the trtllm engine's no-evict
// admission on a quarter of runs, and gives a worker with a prefix cache
// a host offload tier on a third (onboarding must take the same path
// with the shortcut as without), its copies timed or not, with a disk
// tier below it on half of those and object storage on half.
func drawShortcutVariant(rt *rapid.T, a *Args) {
	if rapid.IntRange(0, 3).Draw(rt, "engine") == 0 {
		a.EngineType = EngineTRTLLM
		t := DefaultTRTLLMArgs()
		a.TRTLLM = &t
	}
	if a.EnablePrefixCaching && rapid.IntRange(0, 2).Draw(rt, "g2") == 0 {
		a.NumG2Blocks = rapid.IntRange(1, 64).Draw(rt, "g2_blocks")
		a.KVBytesPerToken = intp(100_000)
		// The copy down at once, or timed, its GPU slots lent until it
		// lands: a 400 kB block takes 8 or 0.03 ms.
		a.BandwidthG1ToG2 = new(rapid.SampledFrom([]float64{0.05, 14, 0}).Draw(rt, "g1_to_g2_gbps"))
		if rapid.Bool().Draw(rt, "g3") {
			a.NumG3Blocks = rapid.IntRange(1, 96).Draw(rt, "g3_blocks")
		}
		a.EnableG4Storage = rapid.Bool().Draw(rt, "g4")
	}
}

// newShortcutPair builds the pair; firstOnly has both report first tokens
// only, as a cluster's workers do. Every Output and input's effect is
// recorded with the metrics after it, and checks both workers.
func newShortcutPair(t tb, args Args, firstOnly bool) *shortcutPair {
	t.Helper()
	p := &shortcutPair{}
	for i := range p.ws {
		w, err := New(args, contextModel{}, 3)
		require.NoError(t, err)
		if firstOnly {
			w.ReportFirstTokensOnly()
		}
		p.ws[i], p.vs[i] = w, NewVirtual(w)
		p.vs[i].OnOutput = func(_ int, out *Output) {
			if w.Scheduler().(*VLLM).coastN > 0 {
				p.coasted++
			}
			p.recs[i].add(out)
			p.metrics[i] = append(p.metrics[i], w.Metrics())
			checkWorker(t, w)
		}
		p.vs[i].OnInput = func(r InputResult) {
			p.replies[i] = append(p.replies[i], r)
			p.metrics[i] = append(p.metrics[i], w.Metrics())
			checkWorker(t, w)
		}
	}
	plain := p.ws[1].Scheduler().(*VLLM)
	plain.canCoast, plain.walkAlways = false, true
	return p
}

// schedule gives both workers in at modeled time at.
func (p *shortcutPair) schedule(at float64, in Input) {
	for _, v := range p.vs {
		v.Schedule(at, 0, in)
	}
}

// runAndCompare runs both workers until they idle and requires the same
// Outputs, input effects and metrics, exactly.
func (p *shortcutPair) runAndCompare(t tb) {
	t.Helper()
	for i, v := range p.vs {
		require.NoError(t, v.Run(), "worker %d", i)
	}
	require.Equal(t, p.recs[1].outs, p.recs[0].outs, "outputs")
	require.Equal(t, p.replies[1], p.replies[0], "inputs' effects")
	require.Equal(t, p.metrics[1], p.metrics[0], "metrics")
}
