package containers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/containers"
)

// postJSON posts body and decodes the JSON answer.
func postJSON(t *testing.T, url string, body map[string]any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out
}

// TestServeImage_AnswersACompletionAndPDByHand: the `mocker serve` image,
// built from this tree, started with a disaggregated config and its
// worker ports published, answers a completion through its router and a
// prefill then decode sent by hand to its worker ports.
func TestServeImage_AnswersACompletionAndPDByHand(t *testing.T) {
	containers.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := containers.StartServe(ctx, containers.ServeSpec{
		Config: map[string]any{
			"engine": "vllm", "disagg": true,
			"prefill": map[string]any{"workers": 1}, "decode": map[string]any{"workers": 1},
			"args": map[string]any{"speedup_ratio": 100, "kv_transfer_abort_timeout_ms": 3_600_000,
				"handoff_session_timeout_ms": 3_600_000},
		},
		WorkerPorts: 2,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Terminate(context.Background())) })

	base, err := s.URL(ctx)
	require.NoError(t, err)
	st, out := postJSON(t, base+"/v1/completions", map[string]any{"prompt": "Hello from a container", "max_tokens": 5})
	require.Equal(t, http.StatusOK, st, "%v", out)
	usage := out["usage"].(map[string]any)
	assert.Equal(t, 5.0, usage["completion_tokens"])
	assert.Positive(t, usage["prompt_tokens"])

	prefill, err := s.WorkerURL(ctx, 0)
	require.NoError(t, err)
	decode, err := s.WorkerURL(ctx, 1)
	require.NoError(t, err)
	prompt := "The same prompt to both halves"
	st, pre := postJSON(t, prefill+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	require.Equal(t, http.StatusOK, st, "%v", pre)
	params := pre["kv_transfer_params"]
	require.NotNil(t, params)
	st, dec := postJSON(t, decode+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4, "kv_transfer_params": params})
	require.Equal(t, http.StatusOK, st, "%v", dec)
	assert.Equal(t, 4.0, dec["usage"].(map[string]any)["completion_tokens"])
	assert.Equal(t, pre["usage"].(map[string]any)["prompt_tokens"], dec["usage"].(map[string]any)["prompt_tokens"])
}
