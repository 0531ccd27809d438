package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// workerServers serves each of s's per-worker endpoints on a loopback
// test server, as `mocker serve --worker-ports` does on its ports, keyed
// by the worker's name (and "-dp<rank>" past rank 0).
func workerServers(t *testing.T, s *Server) map[string]*httptest.Server {
	t.Helper()
	out := map[string]*httptest.Server{}
	for _, w := range s.Workers() {
		ts := httptest.NewServer(w.Handler)
		t.Cleanup(ts.Close)
		key := w.Name
		if w.DPRank > 0 {
			key = fmt.Sprintf("%s-dp%d", w.Name, w.DPRank)
		}
		out[key] = ts
	}
	return out
}

// holdLong is an abort timeout no test outlasts: an hour of modeled time,
// 36 s of wall time at speedup 100, so that a hold waits for its decode
// however slow the host (the session deadline is set to it too).
const holdLong = 3_600_000

// pdConfig is one prefill and one decode worker, with a modeled transfer
// of 64 KiB per token at 10 GB/s and an abort timeout of abortMs.
func pdConfig(abortMs int) cluster.Config {
	return cluster.Config{Disagg: true, Args: map[string]any{
		"speedup_ratio":                100,
		"kv_bytes_per_token":           65536,
		"kv_transfer_bandwidth":        10.0,
		"kv_transfer_abort_timeout_ms": abortMs,
		"handoff_session_timeout_ms":   holdLong,
	}}
}

// prefillAsks are the kv_transfer_params an external router sends a
// prefill, as llm-d's sidecar sends them to vLLM.
func prefillAsks() map[string]any {
	return map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
}

// post sends body as JSON and returns the status, the decoded answer and
// the headers.
func postJSON(t *testing.T, url, path string, body map[string]any) (int, map[string]any, http.Header) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out, resp.Header
}

// apiErr is the error object of an OpenAI-style error answer.
func apiErr(t *testing.T, out map[string]any) (msg, param string) {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	require.True(t, ok, "an error answer: %v", out)
	msg, _ = e["message"].(string)
	param, _ = e["param"].(string)
	return msg, param
}

// metric reads one value (summed over the series with the labels given)
// from url's /metrics.
func metric(t *testing.T, url, name string, labels map[string]string) float64 {
	t.Helper()
	return sum(scrape(t, http.DefaultClient, url)[name], labels)
}

func headerMs(t *testing.T, h http.Header, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(h.Get(name), 64)
	require.NoError(t, err, "header %s: %q", name, h.Get(name))
	return v
}

// TestPDOverHTTP_PrefillThenDecodeAsAnExternalRouter drives P/D by hand
// with the official OpenAI SDK, as an outside router does: a completion
// to the prefill worker's endpoint with do_remote_decode holds the KV and
// returns kv_transfer_params; the same completion to the decode worker's
// endpoint with those params takes the KV over (through the prefill's
// transfer server) and completes, and the held blocks go back to 0.
func TestPDOverHTTP_PrefillThenDecodeAsAnExternalRouter(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, pdConfig(holdLong), Options{})
	ws := workerServers(t, s)
	require.Len(t, ws, 2)
	prompt := longPrefix + "Where does the KV go?"
	nPrompt := int64(len(Tokenize(prompt, nil, nil)))

	var preResp *http.Response
	pc := sdk(ws["prefill-0"].URL, http.DefaultClient)
	pre, err := pc.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     "mocker",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(1),
	}, option.WithJSONSet("kv_transfer_params", prefillAsks()), option.WithResponseInto(&preResp))
	require.NoError(t, err)
	assert.Equal(t, int64(1), pre.Usage.CompletionTokens)
	assert.Equal(t, nPrompt, pre.Usage.PromptTokens)
	raw := pre.JSON.ExtraFields["kv_transfer_params"].Raw()
	var params map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &params), "kv_transfer_params: %s", raw)
	assert.Equal(t, true, params["do_remote_prefill"])
	assert.Equal(t, false, params["do_remote_decode"])
	assert.Equal(t, "prefill-0", params["remote_engine_id"])
	assert.NotEmpty(t, params["remote_host"])
	assert.Positive(t, params["remote_port"])
	assert.Positive(t, params["transfer_id"])
	assert.Len(t, params["transfer_token"], 32)
	blocks, _ := params["remote_block_ids"].([]any)
	assert.Len(t, blocks, int((nPrompt+15)/16), "one id per held block")
	assert.Equal(t, float64(len(blocks)), metric(t, ts.URL, "mocker_kv_held_blocks", nil), "the KV stays held for the decode")
	assert.Equal(t, float64(nPrompt), metric(t, ws["prefill-0"].URL, "vllm:prompt_tokens_total", nil), "the prefill's own /metrics counts its prompt")

	var decResp *http.Response
	dc := sdk(ws["decode-0"].URL, http.DefaultClient)
	dec, err := dc.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     "mocker",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(8),
	}, option.WithJSONSet("kv_transfer_params", params), option.WithResponseInto(&decResp))
	require.NoError(t, err)
	assert.Equal(t, int64(8), dec.Usage.CompletionTokens)
	assert.Equal(t, nPrompt, dec.Usage.PromptTokens, "the decode's usage shows the prompt")
	assert.Equal(t, "length", string(dec.Choices[0].FinishReason))
	// The modeled transfer, as the server reports it: the prompt's tokens
	// × 64 KiB at 10 GB/s, whatever the host's speed.
	transfer := headerMs(t, decResp.Header, HeaderTransfer)
	assert.InDelta(t, float64(nPrompt)*65536/10e9*1000, transfer, 1e-3)
	assert.GreaterOrEqual(t, headerMs(t, decResp.Header, HeaderPin), transfer-1e-3)

	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))
	assert.Equal(t, 1.0, metric(t, ts.URL, "mocker_kv_holds_total", map[string]string{"outcome": "transferred"}))
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_aborts_total", nil))
	assert.Equal(t, 8.0, metric(t, ws["decode-0"].URL, "vllm:generation_tokens_total", nil), "the decode's own /metrics counts its output")
	assert.Equal(t, float64(nPrompt), metric(t, ts.URL, "vllm:prompt_tokens_total", nil), "the prompt is counted once, on the prefill")
}

// TestPDOverHTTP_StreamedDecode: the decode half streams, as a client
// behind the router asked, and its usage chunk shows the prompt.
func TestPDOverHTTP_StreamedDecode(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, pdConfig(holdLong), Options{})
	ws := workerServers(t, s)
	msgs := []map[string]any{{"role": "user", "content": "Hello over two workers"}}
	st, pre, _ := postJSON(t, ws["prefill-0"].URL, "/v1/chat/completions", map[string]any{
		"messages": msgs, "max_completion_tokens": 1, "kv_transfer_params": prefillAsks()})
	require.Equal(t, http.StatusOK, st, "%v", pre)
	params := pre["kv_transfer_params"].(map[string]any)

	dc := sdk(ws["decode-0"].URL, http.DefaultClient)
	stream := dc.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:               "mocker",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello over two workers")},
		MaxCompletionTokens: openai.Int(6),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("kv_transfer_params", params))
	chunks := 0
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if len(stream.Current().Choices) > 0 {
			chunks++
		}
	}
	require.NoError(t, stream.Err())
	assert.GreaterOrEqual(t, chunks, 6, "a chunk per token")
	assert.Equal(t, int64(6), acc.Usage.CompletionTokens)
	assert.Equal(t, pre["usage"].(map[string]any)["prompt_tokens"], float64(acc.Usage.PromptTokens))
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))
}

// TestPDOverHTTP_UnclaimedPrefillAbortsAtItsTimeout: a prefill whose params
// no decode claims holds its KV until kv_transfer_abort_timeout_ms (500
// modeled ms) and frees it: mocker_kv_aborts_total rises by one, the held
// blocks go back to 0, and the late decode is told the params expired.
func TestPDOverHTTP_UnclaimedPrefillAbortsAtItsTimeout(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, pdConfig(500), Options{})
	ws := workerServers(t, s)
	before := metric(t, ts.URL, "mocker_kv_aborts_total", nil)
	body := map[string]any{"prompt": longPrefix, "max_tokens": 1, "kv_transfer_params": prefillAsks()}
	st, pre, _ := postJSON(t, ws["prefill-0"].URL, "/v1/completions", body)
	require.Equal(t, http.StatusOK, st, "%v", pre)
	params := pre["kv_transfer_params"].(map[string]any)

	deadline := time.Now().Add(30 * time.Second)
	for metric(t, ts.URL, "mocker_kv_aborts_total", nil) == before {
		require.True(t, time.Now().Before(deadline), "the hold never aborted")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, before+1, metric(t, ts.URL, "mocker_kv_aborts_total", nil))
	assert.Equal(t, 1.0, metric(t, ts.URL, "mocker_kv_holds_total", map[string]string{"outcome": "aborted"}))
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))
	holds := s.Cluster().Holds()
	require.Len(t, holds, 1)
	assert.InDelta(t, 500, holds[0].DurationMs, 1e-6, "held from its start to the modeled abort timeout")

	body["kv_transfer_params"] = params
	body["max_tokens"] = 4
	st, out, _ := postJSON(t, ws["decode-0"].URL, "/v1/completions", body)
	assert.Equal(t, http.StatusGone, st)
	msg, param := apiErr(t, out)
	assert.Equal(t, "kv_transfer_params", param)
	assert.Contains(t, msg, "expired")
	assert.Contains(t, msg, "abort timeout")
}

// TestPDOverHTTP_ForgedReusedAndMisdirectedParamsAreRefused: params that
// do not prove a handout are refused with an OpenAI-style error before
// anything is applied, and the held KV still goes to the decode that has
// the real ones, once.
func TestPDOverHTTP_ForgedReusedAndMisdirectedParamsAreRefused(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, pdConfig(holdLong), Options{})
	ws := workerServers(t, s)
	pURL, dURL := ws["prefill-0"].URL, ws["decode-0"].URL
	req := func(params any, maxTokens int) map[string]any {
		return map[string]any{"prompt": longPrefix, "max_tokens": maxTokens, "kv_transfer_params": params}
	}
	st, pre, _ := postJSON(t, pURL, "/v1/completions", req(prefillAsks(), 1))
	require.Equal(t, http.StatusOK, st, "%v", pre)
	params := pre["kv_transfer_params"].(map[string]any)
	held := metric(t, ts.URL, "mocker_kv_held_blocks", nil)
	require.Positive(t, held)
	with := func(key string, v any) map[string]any {
		m := map[string]any{}
		for k, x := range params {
			m[k] = x
		}
		if v == nil {
			delete(m, key)
		} else {
			m[key] = v
		}
		return m
	}
	tok := params["transfer_token"].(string)
	// Another hex digit first: a well-formed token, not the one issued.
	flipped := "0" + tok[1:]
	if tok[0] == '0' {
		flipped = "1" + tok[1:]
	}
	cases := []struct {
		name, url string
		body      map[string]any
		status    int
		param     string
		says      string
	}{
		{"forged token", dURL, req(with("transfer_token", flipped), 4), 400, "kv_transfer_params", "token"},
		{"another port", dURL, req(with("remote_port", params["remote_port"].(float64)+1), 4), 400, "kv_transfer_params", "not held at"},
		{"unknown transfer", dURL, req(with("transfer_id", params["transfer_id"].(float64)+1000), 4), 404, "kv_transfer_params", "no prefill holds"},
		{"no token", dURL, req(with("transfer_token", nil), 4), 400, "kv_transfer_params.transfer_token", "required"},
		{"token not hex", dURL, req(with("transfer_token", "zz"), 4), 400, "kv_transfer_params.transfer_token", "32 hex"},
		{"port of the wrong type", dURL, req(with("remote_port", "x"), 4), 400, "kv_transfer_params.remote_port", "want an integer"},
		{"another prompt", dURL, map[string]any{"prompt": "something else", "max_tokens": 4, "kv_transfer_params": params}, 400, "kv_transfer_params", "not the one prefilled"},
		{"no params to a decode", dURL, map[string]any{"prompt": longPrefix}, 400, "kv_transfer_params", "decode worker"},
		{"no params to a prefill", pURL, map[string]any{"prompt": longPrefix}, 400, "kv_transfer_params", "prefill worker"},
		{"decode params to a prefill", pURL, req(params, 4), 400, "kv_transfer_params", "prefill worker"},
		{"prefill asks to a decode", dURL, req(prefillAsks(), 1), 400, "kv_transfer_params", "decode worker"},
		{"params to the router's endpoint", ts.URL, req(params, 4), 400, "kv_transfer_params", "--worker-ports"},
	}
	for _, c := range cases {
		st, out, _ := postJSON(t, c.url, "/v1/completions", c.body)
		assert.Equal(t, c.status, st, c.name)
		msg, param := apiErr(t, out)
		assert.Equal(t, c.param, param, c.name)
		assert.Contains(t, msg, c.says, c.name)
	}
	assert.Equal(t, held, metric(t, ts.URL, "mocker_kv_held_blocks", nil), "nothing was applied: the hold waits for its decode")
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_holds_total", nil))

	st, out, _ := postJSON(t, dURL, "/v1/completions", req(params, 4))
	require.Equal(t, http.StatusOK, st, "%v", out)
	st, out, _ = postJSON(t, dURL, "/v1/completions", req(params, 4))
	assert.Equal(t, http.StatusGone, st, "params are good once")
	msg, _ := apiErr(t, out)
	assert.Contains(t, msg, "already claimed by decode-0")
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))
}

// TestWorkerPorts_EachRankAnswersOnItsOwn: every rank of every aggregated
// worker has its endpoint; a request sent there runs on that rank, and
// the rank's /metrics shows its own series only.
func TestWorkerPorts_EachRankAnswersOnItsOwn(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": 1000, "dp_size": 2}}, Options{})
	var names []string
	for _, w := range s.Workers() {
		names = append(names, fmt.Sprintf("%s/%d/%s", w.Name, w.DPRank, w.Role))
	}
	assert.Equal(t, []string{"worker-0/0/aggregated", "worker-0/1/aggregated", "worker-1/0/aggregated", "worker-1/1/aggregated"}, names)
	ws := workerServers(t, s)
	for range 3 {
		st, out, _ := postJSON(t, ws["worker-1-dp1"].URL, "/v1/completions", map[string]any{"prompt": "pinned", "max_tokens": 2})
		require.Equal(t, http.StatusOK, st, "%v", out)
	}
	fams := scrape(t, http.DefaultClient, ws["worker-1-dp1"].URL)
	success := fams["vllm:request_success_total"]
	require.NotNil(t, success)
	for _, m := range success.Metric {
		for _, l := range m.Label {
			switch l.GetName() {
			case "worker":
				assert.Equal(t, "worker-1", l.GetValue())
			case "engine":
				assert.Equal(t, "1", l.GetValue())
			}
		}
	}
	assert.Equal(t, 3.0, sum(success, map[string]string{"finished_reason": "length"}))
	assert.NotNil(t, fams["mocker_kv_held_blocks"], "the cluster-wide series are there too")
	all := scrape(t, http.DefaultClient, ts.URL)["vllm:request_success_total"]
	assert.Equal(t, 3.0, sum(all, map[string]string{"worker": "worker-1", "engine": "1", "finished_reason": "length"}))
	assert.Equal(t, 3.0, sum(all, map[string]string{"finished_reason": "length"}), "no other rank ran them")
}

// TestPDOverHTTP_DrainingStillTakesHeldPrefillsDecodes: once the server
// drains, new requests get 503, but a decode for a prefill already held
// is the second half of a request in flight: it is served, and the drain
// ends with it.
func TestPDOverHTTP_DrainingStillTakesHeldPrefillsDecodes(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, pdConfig(holdLong), Options{})
	ws := workerServers(t, s)
	body := map[string]any{"prompt": longPrefix, "max_tokens": 1, "kv_transfer_params": prefillAsks()}
	st, pre, _ := postJSON(t, ws["prefill-0"].URL, "/v1/completions", body)
	require.Equal(t, http.StatusOK, st, "%v", pre)

	drained := make(chan error, 1)
	go func() {
		_, err := s.Drain(t.Context())
		drained <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(ts.URL + "/health")
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		require.True(t, time.Now().Before(deadline), "the server never started draining")
		time.Sleep(time.Millisecond)
	}
	st, out, _ := postJSON(t, ws["prefill-0"].URL, "/v1/completions", body)
	assert.Equal(t, http.StatusServiceUnavailable, st, "a new prefill while draining: %v", out)
	st, out, _ = postJSON(t, ws["decode-0"].URL, "/v1/completions", map[string]any{"prompt": longPrefix, "max_tokens": 2})
	assert.Equal(t, http.StatusServiceUnavailable, st, "a decode without params is new too: %v", out)
	select {
	case err := <-drained:
		t.Fatalf("the drain ended with a hold still waiting for its decode: %v", err)
	default:
	}

	body["kv_transfer_params"], body["max_tokens"] = pre["kv_transfer_params"], 4
	st, out, _ = postJSON(t, ws["decode-0"].URL, "/v1/completions", body)
	require.Equal(t, http.StatusOK, st, "%v", out)
	require.NoError(t, <-drained)
	assert.Zero(t, metric(t, ts.URL, "mocker_kv_held_blocks", nil))
}
