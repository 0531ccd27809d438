package serve

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// trtPDConfig is pdConfig on TRT-LLM workers.
func trtPDConfig(abortMs int) cluster.Config {
	cfg := pdConfig(abortMs)
	cfg.Engine = "trtllm"
	return cfg
}

// contextOnly sends prompt to a context (prefill) worker as TensorRT-LLM's
// disaggregated server does (request_type context_only, not streamed) and
// returns the answer's choice's disaggregated_params and prompt_token_ids.
func contextOnly(t *testing.T, url string, prompt any, extra map[string]any) (params map[string]any, ids []any) {
	t.Helper()
	dp := map[string]any{"request_type": "context_only"}
	for k, v := range extra {
		dp[k] = v
	}
	st, out, _ := postJSON(t, url, "/v1/completions", map[string]any{
		"model": "mocker", "prompt": prompt, "max_tokens": 1, "stream": false, "disaggregated_params": dp})
	require.Equal(t, http.StatusOK, st, "%v", out)
	assert.NotContains(t, out, "kv_transfer_params", "answered in the form it was asked in")
	choice := out["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "length", choice["finish_reason"])
	params, ok := choice["disaggregated_params"].(map[string]any)
	require.True(t, ok, "the choice carries disaggregated_params: %v", out)
	ids, _ = out["prompt_token_ids"].([]any)
	return params, ids
}

// generationOnly is what TensorRT-LLM's disaggregated server sends the
// generation worker: the context's params with request_type
// generation_only, the prompt as the ids the context answer gave.
func generationOnly(params map[string]any, ids []any, maxTokens int) map[string]any {
	gen := map[string]any{}
	for k, v := range params {
		gen[k] = v
	}
	gen["request_type"] = "generation_only"
	return map[string]any{"model": "mocker", "prompt": ids, "max_tokens": maxTokens, "disaggregated_params": gen}
}

// TestPDOverHTTP_TRTLLMContextThenGeneration drives a TRT-LLM cluster's
// worker ports as an external router speaking TensorRT-LLM's protocol:
// a context_only request to the prefill port holds the KV and returns
// disaggregated_params (the handout in encoded_opaque_state) and the
// prompt's ids; a generation_only request with them to the decode port
// takes the KV over and completes, and the held blocks go back to 0. The
// same holds with the state under Dynamo's spelling (opaque_state), and
// vLLM's kv_transfer_params work on the same ports.
func TestPDOverHTTP_TRTLLMContextThenGeneration(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, trtPDConfig(holdLong), Options{})
	ws := workerServers(t, s)
	pURL, dURL := ws["prefill-0"].URL, ws["decode-0"].URL
	prompt := longPrefix + "Where does the KV go?"
	nPrompt := len(Tokenize(prompt, nil, nil))

	for round, form := range []string{"encoded_opaque_state", "opaque_state", "kv_transfer_params"} {
		var body map[string]any
		if form == "kv_transfer_params" {
			st, pre, _ := postJSON(t, pURL, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "kv_transfer_params": prefillAsks()})
			require.Equal(t, http.StatusOK, st, "%v", pre)
			body = map[string]any{"prompt": prompt, "max_tokens": 8, "kv_transfer_params": pre["kv_transfer_params"]}
		} else {
			params, ids := contextOnly(t, pURL, prompt, map[string]any{"disagg_request_id": 77 + round})
			assert.Equal(t, "context_only", params["request_type"])
			assert.Positive(t, params["ctx_request_id"])
			assert.Equal(t, float64(77+round), params["disagg_request_id"], "echoed")
			assert.Equal(t, 0.0, params["ctx_dp_rank"])
			state, _ := params["encoded_opaque_state"].(string)
			_, err := base64.StdEncoding.DecodeString(state)
			require.NoError(t, err, "encoded_opaque_state is base64")
			for _, k := range []string{"first_gen_tokens", "draft_tokens"} {
				assert.Contains(t, params, k)
			}
			require.Len(t, ids, nPrompt, "prompt_token_ids are the prompt's")
			assert.Positive(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil), "the KV stays held for the generation worker")
			body = generationOnly(params, ids, 8)
			if form == "opaque_state" {
				dp := body["disaggregated_params"].(map[string]any)
				dp["opaque_state"] = dp["encoded_opaque_state"]
				delete(dp, "encoded_opaque_state")
			}
		}
		st, dec, _ := postJSON(t, dURL, "/v1/completions", body)
		require.Equal(t, http.StatusOK, st, "%s: %v", form, dec)
		u := dec["usage"].(map[string]any)
		assert.Equal(t, 8.0, u["completion_tokens"], form)
		assert.Equal(t, float64(nPrompt), u["prompt_tokens"], form)
		assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil), "%s: the held blocks went to the decode", form)
		assert.Equal(t, float64(round+1), metric(t, ts.URL, "mocker_kv_holds_total", map[string]string{"outcome": "transferred"}), form)
	}
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_aborts_total", nil))
	assert.Equal(t, 3.0, metric(t, pURL, "trtllm_request_success_total", nil)+metric(t, dURL, "trtllm_request_success_total", nil))
}

// TestPDOverHTTP_TRTLLMUnclaimedContextAborts: a context_only request
// whose params no generation worker claims holds its KV until the abort
// timeout (500 modeled ms) and frees it, and the late generation_only
// request is told they expired.
func TestPDOverHTTP_TRTLLMUnclaimedContextAborts(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, trtPDConfig(500), Options{})
	ws := workerServers(t, s)
	params, ids := contextOnly(t, ws["prefill-0"].URL, longPrefix, nil)
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, ts.URL, "mocker_kv_aborts_total", nil) == 0 {
		require.True(t, time.Now().Before(deadline), "the hold never aborted")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, 1.0, metric(t, ts.URL, "mocker_kv_holds_total", map[string]string{"outcome": "aborted"}))
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))

	st, out, _ := postJSON(t, ws["decode-0"].URL, "/v1/completions", generationOnly(params, ids, 4))
	assert.Equal(t, http.StatusGone, st)
	msg, param := apiErr(t, out)
	assert.Equal(t, "disaggregated_params", param)
	assert.Contains(t, msg, "expired")
}

// TestPDOverHTTP_TRTLLMBadParamsAreRefused: disaggregated_params that ask
// for nothing a worker does, or do not prove a handout, are refused
// naming the field, and the hold still goes to the real params; on a vLLM
// cluster disaggregated_params mean nothing (vLLM ignores the field).
func TestPDOverHTTP_TRTLLMBadParamsAreRefused(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, trtPDConfig(holdLong), Options{})
	ws := workerServers(t, s)
	pURL, dURL := ws["prefill-0"].URL, ws["decode-0"].URL
	params, ids := contextOnly(t, pURL, longPrefix, nil)
	good := generationOnly(params, ids, 4)
	withState := func(state any) map[string]any {
		b := generationOnly(params, ids, 4)
		dp := b["disaggregated_params"].(map[string]any)
		if state == nil {
			delete(dp, "encoded_opaque_state")
		} else {
			dp["encoded_opaque_state"] = state
		}
		return b
	}
	var o opaqueState
	raw, err := base64.StdEncoding.DecodeString(params["encoded_opaque_state"].(string))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &o))
	forged := o
	forged.TransferToken = "0123456789abcdef0123456789abcdef"
	if forged.TransferToken == o.TransferToken {
		forged.TransferToken = "1123456789abcdef0123456789abcdef"
	}
	both := generationOnly(params, ids, 4)
	both["kv_transfer_params"] = prefillAsks()
	dp := func(v any) map[string]any { return map[string]any{"prompt": longPrefix, "disaggregated_params": v} }
	cases := []struct {
		name, url string
		body      map[string]any
		status    int
		param     string
		says      string
	}{
		{"no state", dURL, withState(nil), 400, "disaggregated_params.encoded_opaque_state", "required"},
		{"state not base64", dURL, withState("%%%"), 400, "disaggregated_params.encoded_opaque_state", "base64"},
		{"state not ours", dURL, withState(base64.StdEncoding.EncodeToString([]byte("xyz"))), 400, "disaggregated_params.encoded_opaque_state", "opaque state"},
		{"forged token", dURL, withState(forged.encode()), 400, "disaggregated_params", "token"},
		{"no request type", dURL, dp(map[string]any{}), 400, "disaggregated_params.request_type", "required"},
		{"unknown request type", pURL, dp(map[string]any{"request_type": "prefill"}), 400, "disaggregated_params.request_type", "context_only"},
		{"request type of the wrong type", pURL, dp(map[string]any{"request_type": 1}), 400, "disaggregated_params.request_type", "want a string"},
		{"both forms", dURL, both, 400, "disaggregated_params", "not both"},
		{"context to a decode", dURL, dp(map[string]any{"request_type": "context_only"}), 400, "disaggregated_params", "generation_only"},
		{"generation to a prefill", pURL, good, 400, "disaggregated_params", "context_only"},
		{"whole request to a prefill", pURL, dp(map[string]any{"request_type": "context_and_generation"}), 400, "disaggregated_params", "prefill worker"},
		{"to the router's endpoint", ts.URL, good, 400, "disaggregated_params", "--worker-ports"},
	}
	for _, c := range cases {
		st, out, _ := postJSON(t, c.url, "/v1/completions", c.body)
		assert.Equal(t, c.status, st, c.name)
		msg, param := apiErr(t, out)
		assert.Equal(t, c.param, param, c.name)
		assert.Contains(t, msg, c.says, c.name)
	}
	st, out, _ := postJSON(t, dURL, "/v1/completions", good)
	require.Equal(t, http.StatusOK, st, "%v", out)
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))

	t.Run("vllm cluster", func(t *testing.T) {
		t.Parallel()
		s, _ := startServer(t, pdConfig(holdLong), Options{})
		ws := workerServers(t, s)
		st, out, _ := postJSON(t, ws["prefill-0"].URL, "/v1/completions", dp(map[string]any{"request_type": "context_only"}))
		assert.Equal(t, http.StatusBadRequest, st)
		msg, param := apiErr(t, out)
		assert.Equal(t, "kv_transfer_params", param)
		assert.NotContains(t, msg, "disaggregated_params", "a vLLM worker speaks of its own params only")
	})
}
