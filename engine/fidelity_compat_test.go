package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Golden tests for dynamo_compat (docs/fidelity.md). Every expected value
// is worked out by hand from Dynamo's formulas as the reference notes give
// them (Dynamo's lib/mocker scheduler sources, vllm/core.rs and sglang/*.rs), never taken from mocker.

// TestFidelity_SGLangDecodeUtilisation (item 1). SGLang defaults: 16384
// pages of 1 token, so the pool holds 16384 tokens. Dynamo passes the
// logical KV (the sum of context lengths) and does not clamp u:
//
//	batch 64 × context 2048 = 131072 tokens, u = 8:
//	  −25.74·64 + 54.01·8 + 5.74 = −1209.54  → floored at 1 ms
//	batch 16 × context 2048 = 32768 tokens, u = 2:
//	  −25.74·4 + 54.01·2 + 5.74 = 10.80 ms
//
// mocker caps the KV at the pool (u = 1): −25.74 + 54.01 + 5.74 = 34.01 ms.
func TestFidelity_SGLangDecodeUtilisation(t *testing.T) {
	for _, tc := range []struct {
		batch           int
		mocker, dynamo  float64
		contextPerQuery int
	}{
		{64, 34.01, 1, 2048},
		{16, 34.01, 10.80, 2048},
	} {
		for _, compat := range []bool{false, true} {
			a, err := ParseArgs([]byte(`{"engine_type":"sglang"}`))
			require.NoError(t, err)
			a.DynamoCompat = compat
			g, err := NewSGLang(a, nil, 1)
			require.NoError(t, err)
			want := tc.mocker
			if compat {
				want = tc.dynamo
			}
			got := g.decodeMs(tc.batch, float64(tc.batch*tc.contextPerQuery))
			assert.InDelta(t, want, got, 1e-9, "batch %d, dynamo_compat %v", tc.batch, compat)
		}
	}
}

// TestFidelity_MeanPromptLength (item 2). Three prompts of 333, 333 and
// 334 tokens (1000 in all, nothing cached) in one prefill pass:
//
//	Dynamo: mean = 1000 / 3 = 333 (integer division), T = 3 × 333 = 999:
//	  4.209989e-7·999² + 1.518344e-2·999 + 16.50142 = 32.08983 ms
//	mocker: mean = 333.33…, T = 1000:
//	  4.209989e-7·1000² + 1.518344e-2·1000 + 16.50142 = 32.10586 ms
func TestFidelity_MeanPromptLength(t *testing.T) {
	for _, tc := range []struct {
		compat bool
		want   float64
	}{
		{false, 4.209989e-7*1000*1000 + 1.518344e-2*1000 + 16.50142},
		{true, 4.209989e-7*999*999 + 1.518344e-2*999 + 16.50142},
	} {
		w := newWorker(t, prefillArgs(1024, func(a *Args) { a.DynamoCompat = tc.compat }))
		for i, n := range []int{333, 333, 334} {
			require.NoError(t, w.Submit(0, Request{ID: uint64(i + 1), Tokens: seqTokens(uint32(10000*(i+1)), n), MaxTokens: 1}, Release))
		}
		out := w.Step(0)
		require.NotNil(t, out)
		require.True(t, out.Ran)
		assert.InDelta(t, tc.want, out.PrefillMs, 1e-9, "dynamo_compat %v", tc.compat)
	}
	assert.InDelta(t, 32.0898, 4.209989e-7*999*999+1.518344e-2*999+16.50142, 5e-5)
	assert.InDelta(t, 32.1059, 4.209989e-7*1000*1000+1.518344e-2*1000+16.50142, 5e-5)
}

// TestFidelity_SGLangRatioAfterRetraction (item 3). Two 4-token prompts
// with 100 output tokens each (104 tokens, 26 pages, fit alone) share a
// pool of 40 pages of 4 tokens, so one is retracted before they finish.
// Dynamo main then re-estimates the new-token ratio from the one still
// running:
//
//	min(1, (decoded + 20·n) / (max_new + 1)) = min(1, (decoded + 20) / 101)
//
// which stays below 1 here (decoded is under 81).
//
// with decoded its output tokens so far; mocker resets it to the initial
// 0.7 × schedule_conservativeness = 0.7.
func TestFidelity_SGLangRatioAfterRetraction(t *testing.T) {
	for _, compat := range []bool{false, true} {
		w := newWorker(t, sglangArgs(40, func(a *Args) {
			a.SGLang.ClipMaxNewTokens = 1
			a.DynamoCompat = compat
		}))
		g := w.Scheduler().(*SGLang)
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 4), MaxTokens: 100}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 4), MaxTokens: 100}, Release))
		now := 0.0
		var retracted uint64
		for i := 0; i < 5000 && retracted == 0; i++ {
			at, ok := w.NextWake()
			require.True(t, ok, "the worker parked before a retraction")
			now = max(now, at)
			out := w.Step(now)
			if out == nil {
				continue
			}
			for _, e := range out.Events {
				if e.Kind == EventPreempted {
					retracted = e.RequestID
				}
			}
			if retracted == 0 {
				r.add(out)
				now = out.End
			}
		}
		require.NotZero(t, retracted, "the pool must run out")
		survivor := uint64(3) - retracted
		decoded := 0
		for _, tk := range r.tokens {
			if tk.RequestID == survivor {
				decoded++
			}
		}
		require.Positive(t, decoded)
		want := 0.7
		if compat {
			require.Less(t, decoded, 81, "the re-estimate must not clamp at 1, or it proves nothing")
			want = float64(decoded+20) / 101
		}
		assert.InDelta(t, want, g.NewTokenRatio(), 1e-12, "dynamo_compat %v, survivor decoded %d", compat, decoded)
	}
}

// TestFidelity_FixedTimingModel (item 5): timing_model {"type": "fixed",
// "prefill_ms": 2, "decode_ms": 1.5}: an aggregated vLLM pass that
// prefills a prompt and samples its first token costs 2 + 1.5 = 3.5 ms,
// a decode step 1.5 ms.
func TestFidelity_FixedTimingModel(t *testing.T) {
	a, err := ParseArgs([]byte(`{"block_size":4,"timing_model":{"type":"fixed","prefill_ms":2,"decode_ms":1.5}}`))
	require.NoError(t, err)
	w := newWorker(t, a)
	require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 40), MaxTokens: 2}, Release))
	out := w.Step(0)
	require.NotNil(t, out)
	assert.InDelta(t, 3.5, out.End, 1e-12)
	out = w.Step(out.End)
	require.NotNil(t, out)
	assert.InDelta(t, 1.5, out.End-out.Start, 1e-12)

	s, err := ParseArgs([]byte(`{"timing_model":"polynomial"}`))
	require.NoError(t, err)
	assert.Equal(t, TimingPolynomial, s.TimingModel.Type)
}

// TestFidelity_KVBytesAliases (item 5): Dynamo main's kv_cache_bytes_per_token
// and its alias kv_transfer_bytes_per_token set kv_bytes_per_token. The
// reference's example: 128 tokens × 1e6 B at 1 GB/s = 128 ms.
func TestFidelity_KVBytesAliases(t *testing.T) {
	for _, key := range []string{"kv_bytes_per_token", "kv_cache_bytes_per_token", "kv_transfer_bytes_per_token"} {
		a, err := ParseArgs([]byte(`{"` + key + `":1000000,"kv_transfer_bandwidth":1}`))
		require.NoError(t, err, key)
		require.NotNil(t, a.KVBytesPerToken, key)
		assert.InDelta(t, 128, a.TransferDelayMs(128), 1e-9, key)
	}
	a, err := ParseArgs([]byte(`{"kv_bytes_per_token":7,"kv_cache_bytes_per_token":7}`))
	require.NoError(t, err, "the same value under two spellings agrees")
	assert.Equal(t, 7, *a.KVBytesPerToken)
}

// TestFidelity_DynamoRanges (item 5): Dynamo's validation ranges. vLLM
// block_size ≥ 2, sglang schedule_conservativeness in [0, 1],
// decode_speedup_ratio ≥ 0 (0 meaning no extra decode speedup).
func TestFidelity_DynamoRanges(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"block_size":1}`, false},
		{`{"block_size":2}`, true},
		{`{"engine_type":"sglang","block_size":1}`, true},
		{`{"engine_type":"sglang","sglang":{"schedule_conservativeness":1.3}}`, false},
		{`{"engine_type":"sglang","sglang":{"schedule_conservativeness":1}}`, true},
		{`{"decode_speedup_ratio":0}`, true},
		{`{"decode_speedup_ratio":-0.5}`, false},
		{`{"dp_size":0}`, false},
		{`{"dp_size":4}`, true},
	} {
		_, err := ParseArgs([]byte(tc.in))
		if tc.ok {
			assert.NoError(t, err, tc.in)
		} else {
			assert.Error(t, err, tc.in)
		}
	}
	// decode_speedup_ratio 0 decodes at the unscaled speed, as 1 does.
	zero, err := ParseArgs([]byte(`{"block_size":4,"decode_speedup_ratio":0}`))
	require.NoError(t, err)
	one, err := ParseArgs([]byte(`{"block_size":4}`))
	require.NoError(t, err)
	ends := map[float64]float64{}
	for _, a := range []Args{zero, one} {
		w := newWorker(t, a)
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 1}, Release))
		out := w.Step(0)
		require.NotNil(t, out)
		ends[a.DecodeSpeedupRatio] = out.DecodeMs
	}
	assert.Equal(t, ends[1], ends[0])
}

// TestFidelity_SGLangPriorityOrder (item 3): Dynamo main orders SGLang's
// waiting queue by priority, higher first. With one running slot, a
// priority-5 request submitted after a priority-0 one runs first under
// dynamo_compat; mocker's default serves arrival order.
func TestFidelity_SGLangPriorityOrder(t *testing.T) {
	for _, tc := range []struct {
		compat bool
		first  uint64
	}{
		{false, 1},
		{true, 2},
	} {
		w := newWorker(t, sglangArgs(64, func(a *Args) {
			a.MaxNumSeqs = intp(1)
			a.DynamoCompat = tc.compat
		}))
		var r record
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 8), MaxTokens: 2, Priority: 0}, Release))
		require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 8), MaxTokens: 2, Priority: 5}, Release))
		driveAll(t, w, &r, 0)
		require.Len(t, r.completions, 2)
		assert.Equal(t, tc.first, r.completions[0].RequestID, "dynamo_compat %v", tc.compat)
	}
}

// TestFidelity_SGLangRatioDecaysEveryPass (item 3): Dynamo decays the
// new-token ratio by (init − min)/600 on every pass. After one extend pass
// with the defaults (init 0.7, min 0.14 × 0.7 = 0.098):
//
//	0.7 − (0.7 − 0.098)/600 = 0.698996667
//
// mocker decays only on decode passes, so it is still 0.7.
func TestFidelity_SGLangRatioDecaysEveryPass(t *testing.T) {
	for _, tc := range []struct {
		compat bool
		want   float64
	}{
		{false, 0.7},
		{true, 0.7 - (0.7-0.098)/600},
	} {
		w := newWorker(t, sglangArgs(64, func(a *Args) { a.DynamoCompat = tc.compat }))
		require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: 4}, Release))
		out := w.Step(0)
		require.NotNil(t, out)
		require.Equal(t, 8, out.PrefillTokens, "an extend pass")
		assert.InDelta(t, tc.want, w.Scheduler().(*SGLang).NewTokenRatio(), 1e-12, "dynamo_compat %v", tc.compat)
	}
}
