package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func prompt(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(7*i + 3)
	}
	return out
}

// claimOf is the claim a caller makes from a handout.
// pdHoldLong is roomyDisagg with an abort timeout no test outlasts (an
// hour of modeled time), so a hold waits for its decode however slow the
// host.
func pdHoldLong() Config {
	cfg := roomyDisagg()
	cfg.Args["kv_transfer_abort_timeout_ms"] = 3_600_000
	cfg.Args["handoff_session_timeout_ms"] = 3_600_000
	return cfg
}

func claimOf(ho Handout) Claim {
	return Claim{TransferID: ho.TransferID, Host: ho.Host, Port: ho.Port, Token: ho.Token}
}

func TestPD_PrefillThenDecodeCompletesThroughTheTransferServer(t *testing.T) {
	cfg := pdHoldLong()
	cfg.StreamTokens = true
	c := start(t, cfg)
	ctx := context.Background()
	tokens := prompt(300)
	ho, ok, pre := c.Prefill(ctx, Target{Worker: "prefill-0"}, Request{Tokens: tokens, MaxTokens: 1})
	require.True(t, ok, pre.Error)
	assert.Equal(t, OutcomeCompleted, pre.Outcome)
	assert.Equal(t, 1, pre.OutputTokens)
	assert.Positive(t, pre.TTFTMs)
	assert.NotZero(t, ho.TransferID)
	assert.Equal(t, (300+15)/16, ho.Blocks, "the prompt's blocks are held")
	assert.Equal(t, Target{Worker: "prefill-0"}, ho.Source)
	assert.Equal(t, ho.Blocks, c.Stats().HeldBlocks, "the KV stays held until a decode claims it")

	// The decode's caller hears its tokens as they are produced, as a
	// stream's does (OnToken runs on the loop, before the result).
	var heard []int
	onToken := func(i int, _ float64) { heard = append(heard, i) }
	res, err := c.Decode(ctx, Target{Worker: "decode-0"}, claimOf(ho), Request{Tokens: tokens, MaxTokens: 12, OnToken: onToken})
	require.NoError(t, err)
	require.NotEmpty(t, heard, "the decode's tokens reach its caller's listener")
	assert.Equal(t, 11, heard[len(heard)-1], "up to the last token")
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	assert.Equal(t, 12, res.OutputTokens)
	assert.Equal(t, "prefill-0", res.PrefillWorker)
	assert.Equal(t, "decode-0", res.DecodeWorker)
	assert.Equal(t, HoldTransferred, res.HoldOutcome)
	assert.Equal(t, ho.TransferID, res.TransferID)
	assert.Positive(t, res.TransferMs)
	holds := c.Holds()
	require.Len(t, holds, 1)
	assert.Equal(t, "decode-0", holds[0].DecodeWorker, "the claim named the hold's decode")
	assert.True(t, holds[0].Claimed)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.Requests, "both halves are one request")
	assert.Equal(t, uint64(1), s.Completed)
	assert.Equal(t, uint64(1), s.TransfersCompleted)
	assert.Zero(t, s.HeldBlocks)
}

func TestPD_UnclaimedHoldAbortsAtItsTimeout(t *testing.T) {
	cfg := roomyDisagg()
	cfg.Args["kv_transfer_abort_timeout_ms"] = 500
	c := start(t, cfg)
	tokens := prompt(64)
	ho, ok, pre := c.Prefill(context.Background(), Target{Worker: "prefill-0"}, Request{Tokens: tokens})
	require.True(t, ok, pre.Error)
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.HoldsAborted)
	assert.Equal(t, uint64(1), s.Aborted)
	assert.Zero(t, s.HeldBlocks)
	holds := c.Holds()
	require.Len(t, holds, 1)
	assert.Equal(t, HoldAborted, holds[0].Outcome)
	assert.InDelta(t, 500, holds[0].DurationMs, 1e-6, "the abort clock ran from the hold's start")
	assert.Empty(t, holds[0].DecodeWorker, "no decode was ever named")

	_, err := c.Decode(context.Background(), Target{Worker: "decode-0"}, claimOf(ho), Request{Tokens: tokens})
	var ce *ClaimError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, ClaimExpired, ce.Code, ce.Msg)
	assert.Contains(t, ce.Msg, "expired")
}

func TestPD_BadClaimsAreRefusedAndLeaveTheHoldToItsDecode(t *testing.T) {
	c := start(t, pdHoldLong())
	ctx := context.Background()
	tokens := prompt(100)
	ho, ok, pre := c.Prefill(ctx, Target{Worker: "prefill-0"}, Request{Tokens: tokens})
	require.True(t, ok, pre.Error)
	dec := Target{Worker: "decode-0"}
	code := func(cl Claim, req Request) ClaimCode {
		t.Helper()
		res, err := c.Decode(ctx, dec, cl, req)
		var ce *ClaimError
		if !errors.As(err, &ce) {
			t.Fatalf("claim %+v was not refused: %+v", cl, res)
		}
		assert.Equal(t, OutcomeError, res.Outcome)
		return ce.Code
	}
	forged := claimOf(ho)
	forged.Token[0] ^= 1
	assert.Equal(t, ClaimForged, code(forged, Request{Tokens: tokens}))
	moved := claimOf(ho)
	moved.Port++
	assert.Equal(t, ClaimForged, code(moved, Request{Tokens: tokens}))
	unknown := claimOf(ho)
	unknown.TransferID += 1000
	assert.Equal(t, ClaimUnknown, code(unknown, Request{Tokens: tokens}))
	assert.Equal(t, ClaimMismatch, code(claimOf(ho), Request{Tokens: prompt(99)}))

	res, err := c.Decode(ctx, dec, claimOf(ho), Request{Tokens: tokens})
	require.NoError(t, err)
	require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
	assert.Equal(t, ClaimSpent, code(claimOf(ho), Request{Tokens: tokens}), "params are good once")
	s := drainAndCheck(t, c)
	assert.Equal(t, uint64(1), s.Requests)
	assert.Equal(t, uint64(1), s.HoldsReleased)
}

func TestPD_PinnedRequestsGoWhereTheyAreSent(t *testing.T) {
	c := start(t, Config{Workers: 3, Args: map[string]any{"speedup_ratio": 1000}})
	for _, w := range []string{"worker-2", "worker-0"} {
		res := c.GenerateOn(context.Background(), Target{Worker: w}, Request{PromptTokens: 40, MaxTokens: 3})
		require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
		assert.Equal(t, w, res.PrefillWorker)
		assert.Equal(t, w, res.DecodeWorker)
	}
	res := c.GenerateOn(context.Background(), Target{Worker: "worker-9"}, Request{PromptTokens: 40})
	assert.Equal(t, OutcomeError, res.Outcome)
	assert.Contains(t, res.Error, "no worker worker-9")
	_, ok, pre := c.Prefill(context.Background(), Target{Worker: "worker-0"}, Request{PromptTokens: 40})
	assert.False(t, ok)
	assert.Contains(t, pre.Error, "is a aggregated worker, not a prefill one")
	drainAndCheck(t, c)
}

// TestPD_SGLangSplitsOnlySourceFirst: an SGLang cluster with
// optimistic_prefill computes before its decode reserves, so a prefill
// can be handed out and claimed as vLLM's is; without it the decode
// reserves first, and Prefill refuses, saying what to set.
func TestPD_SGLangSplitsOnlySourceFirst(t *testing.T) {
	for _, optimistic := range []bool{true, false} {
		cfg := pdHoldLong()
		cfg.Engine = "sglang"
		cfg.Args["sglang"] = map[string]any{"optimistic_prefill": optimistic}
		c := start(t, cfg)
		tokens := prompt(80)
		ho, ok, pre := c.Prefill(context.Background(), Target{Worker: "prefill-0"}, Request{Tokens: tokens})
		if !optimistic {
			assert.False(t, ok)
			assert.Contains(t, pre.Error, "set sglang.optimistic_prefill")
			drainAndCheck(t, c)
			continue
		}
		require.True(t, ok, pre.Error)
		res, err := c.Decode(context.Background(), Target{Worker: "decode-0"}, claimOf(ho), Request{Tokens: tokens, MaxTokens: 5})
		require.NoError(t, err)
		require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
		assert.Equal(t, 5, res.OutputTokens)
		assert.Zero(t, drainAndCheck(t, c).HeldBlocks)
	}
}
