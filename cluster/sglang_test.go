package cluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sglangSaturated is an SGLang cluster whose one decode worker runs one
// sequence at a time against long generations, with an abort timeout far
// shorter than the queue the decode builds: source-first, holds strand and
// abort; destination-first, nothing does.
func sglangSaturated(optimistic bool) Config {
	cfg := strandingDisagg(300)
	cfg.Engine = "sglang"
	cfg.Args["kv_bytes_per_token"] = 65536
	cfg.Args["kv_transfer_bandwidth"] = 10.0
	// The decode's one sequence slot is the bottleneck only if a
	// reservation takes it, as mocker's former rule had it (by default a
	// reservation takes KV only, and the decode's KV bounds the queue).
	cfg.Decode.Args["reserve_takes_slot"] = true
	if optimistic {
		cfg.Args["sglang"] = map[string]any{"optimistic_prefill": true}
	}
	return cfg
}

func TestSGLang_DestinationFirstNeverStrands(t *testing.T) {
	c := start(t, sglangSaturated(false))
	const n, prompt = 8, 64
	results := runAll(c, repeat(Request{PromptTokens: prompt, MaxTokens: 150}, n))
	// tokens × bytes per token / (GB/s × 1e9) s, in ms.
	wantTransfer := float64(prompt) * 65536 / 10e9 * 1000
	ids := map[uint64]bool{}
	longestWait := 0.0
	for _, r := range results {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		longestWait = max(longestWait, r.DecodeWaitMs)
		assert.Greater(t, r.TTFTMs, r.DecodeWaitMs, "the wait for a reservation is part of the time to first token")
		assert.Equal(t, 150, r.OutputTokens)
		assert.True(t, r.HoldStarted)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.InDelta(t, wantTransfer, r.TransferMs, 1e-6)
		assert.InDelta(t, r.TransferMs, r.HoldMs, 1e-6, "the hold lasts the transfer and not a moment of decode queueing")
		assert.NotZero(t, r.TransferID)
		ids[r.TransferID] = true
	}
	assert.Len(t, ids, n, "bootstrap rooms are unique")
	assert.Greater(t, longestWait, 300.0, "the decode queue outlasted the abort timeout, which a source-first hold would not have survived")
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(n), s.Completed)
	assert.Zero(t, s.Aborted)
	assert.Zero(t, s.HoldsAborted, "no hold waited for the saturated decode")
	assert.Equal(t, uint64(n), s.Holds)
	assert.Equal(t, uint64(n), s.TransfersStarted)
	assert.Equal(t, uint64(n), s.TransfersCompleted)
	assert.InDelta(t, wantTransfer, s.HoldMsMax, 1e-6)
	for _, h := range c.Holds() {
		assert.True(t, h.Claimed)
		assert.Equal(t, h.StartMs, h.TransferStartMs, "the transfer starts with the hold")
	}
}

func TestSGLang_DestinationFirstRefusalHoldsNothing(t *testing.T) {
	cfg := sglangSaturated(false)
	cfg.Decode.Args["num_gpu_blocks"] = 2
	c := start(t, cfg)
	res := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4})
	assert.Equal(t, OutcomeRejected, res.Outcome)
	assert.Contains(t, res.Error, "num_gpu_blocks is 2")
	assert.False(t, res.PrefillRejected)
	assert.False(t, res.HoldStarted, "the prefill never ran: its decode was refused first")
	assert.Zero(t, res.TransferID)
	s := drainAndCheck(t, c)
	assert.Zero(t, s.Holds)
	require.Equal(t, "prefill-0", s.Workers[0].Name)
	assert.Zero(t, s.Workers[0].Passes, "the prefill worker computed nothing")
}

func TestSGLang_DestinationFirstForensicOrder(t *testing.T) {
	c := start(t, sglangSaturated(false))
	res := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 3})
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	drainAndCheck(t, c)
	var got []string
	for _, ev := range c.Events() {
		got = append(got, ev.Name)
	}
	assert.Equal(t, []string{EventDecodeWait, EventDecodeReserved, EventHoldStart, EventTransferStart, EventHoldEnd}, got)
}

func TestSGLang_OptimisticPrefillHandsOff(t *testing.T) {
	cfg := roomyDisagg()
	cfg.Engine = "sglang"
	cfg.Args["sglang"] = map[string]any{"optimistic_prefill": true}
	c := start(t, cfg)
	for _, r := range runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 5}, 4)) {
		require.Equal(t, OutcomeCompleted, r.Outcome, r.Error)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.Equal(t, 5, r.OutputTokens)
		assert.Positive(t, r.TransferMs)
	}
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(4), s.TransfersCompleted)
}

func TestSGLang_OptimisticPrefillStrandsAndAborts(t *testing.T) {
	c := start(t, sglangSaturated(true))
	const n = 8
	results := runAll(c, repeat(Request{PromptTokens: 64, MaxTokens: 150}, n))
	var aborted int
	for _, r := range results {
		assert.True(t, r.HoldStarted)
		switch r.Outcome {
		case OutcomeCompleted:
			assert.Equal(t, "transferred", r.HoldOutcome)
		case OutcomeAborted:
			aborted++
			assert.Equal(t, "aborted", r.HoldOutcome)
			assert.InDelta(t, 300, r.HoldMs, 50, "the hold lasted the abort timeout")
		default:
			t.Fatalf("unexpected outcome %q: %s", r.Outcome, r.Error)
		}
	}
	assert.Positive(t, aborted, "computing before the decode is ready strands KV behind a saturated decode")
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(aborted), s.HoldsAborted)
	assert.Equal(t, uint64(aborted), s.Aborted)
}
