package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// post sends body to url and decodes an error answer, if any.
func post(t *testing.T, hc *http.Client, url, body string) (int, errorBody, []byte) {
	t.Helper()
	a := send(hc, url, body)
	require.NoError(t, a.err)
	return a.status, a.e, a.raw
}

// sentAnswer is what send got.
type sentAnswer struct {
	status int
	e      errorBody
	raw    []byte
	err    error
}

// send is post for any goroutine: it reports failures rather than
// failing the test.
func send(hc *http.Client, url, body string) sentAnswer {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return sentAnswer{err: err}
	}
	defer resp.Body.Close()
	a := sentAnswer{status: resp.StatusCode}
	if a.raw, a.err = io.ReadAll(resp.Body); a.err != nil {
		return a
	}
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(a.raw, &a.e); err != nil {
			a.err = fmt.Errorf("an error answer is OpenAI's error JSON: %w: %s", err, a.raw)
		}
	}
	return a
}

// TestBadInput_EachErrorHasItsStatusAndNamesTheField: every malformed or
// refused request gets OpenAI's error JSON with the status a client
// expects, code equal to it, and a message (and param) naming what to fix.
func TestBadInput_EachErrorHasItsStatusAndNamesTheField(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, cluster.Config{Args: map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 64}}, Options{})
	limit := s.Cluster().MaxModelLen()
	require.Equal(t, 64*16, limit)
	longIDs := "[" + strings.Repeat("7,", limit) + "7]"
	for _, tc := range []struct {
		name, path, body string
		status           int
		param, message   string
	}{
		{"invalid JSON", "/v1/completions", `{"prompt": "a",`, 400, "", "invalid JSON"},
		{"empty body", "/v1/completions", ``, 400, "", "empty request body"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "", "want a JSON object"},
		{"max_tokens a string", "/v1/completions", `{"prompt": "a", "max_tokens": "ten"}`, 400, "max_tokens", "max_tokens: want an integer"},
		{"stream not a boolean", "/v1/completions", `{"prompt": "a", "stream": "yes"}`, 400, "stream", "stream: want a boolean"},
		{"messages not an array", "/v1/chat/completions", `{"messages": "hi"}`, 400, "messages", "messages: want an array"},
		{"prompt a number", "/v1/completions", `{"prompt": 5}`, 400, "prompt", "prompt: want a string"},
		{"prompt missing", "/v1/completions", `{"max_tokens": 3}`, 400, "prompt", "prompt: required"},
		{"prompt empty", "/v1/completions", `{"prompt": ""}`, 400, "prompt", "prompt: empty"},
		{"prompt empty array", "/v1/completions", `{"prompt": []}`, 400, "prompt", "prompt: empty"},
		{"batched prompts", "/v1/completions", `{"prompt": ["a", "b"]}`, 400, "prompt", "batched prompts"},
		{"negative token id", "/v1/completions", `{"prompt": [1, -2]}`, 400, "prompt", "token id 1"},
		{"fractional token id", "/v1/completions", `{"prompt": [1.5]}`, 400, "prompt", "token id 0"},
		{"unknown model", "/v1/completions", `{"model": "other", "prompt": "a"}`, 404, "model", "The model `other` does not exist."},
		{"n of 2", "/v1/completions", `{"prompt": "a", "n": 2}`, 400, "n", "n: only n=1"},
		{"stream_options without stream", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}], "stream_options": {"include_usage": true}}`, 400, "stream_options", "stream_options: allowed only with stream"},
		{"max_tokens zero", "/v1/completions", `{"prompt": "a", "max_tokens": 0}`, 400, "max_tokens", "max_tokens: want an integer ≥ 1"},
		{"max_completion_tokens over the context", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 5000}`, 400, "max_completion_tokens", "maximum context length is 1024 tokens"},
		{"prompt over the context", "/v1/completions", `{"prompt": ` + longIDs + `}`, 400, "prompt", "This model's maximum context length is 1024 tokens. However, your request has 1025 input tokens."},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages", "messages: required"},
		{"message without role", "/v1/chat/completions", `{"messages": [{"content": "a"}]}`, 400, "messages", "messages[0].role: required"},
		{"image part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "messages", `type "image_url" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, e, raw := post(t, client(ts), ts.URL+tc.path, tc.body)
			require.Equal(t, tc.status, status, "%s", raw)
			assert.Equal(t, tc.status, e.Error.Code)
			assert.Contains(t, e.Error.Message, tc.message)
			assert.NotEmpty(t, e.Error.Type)
			if tc.param == "" {
				assert.Nil(t, e.Error.Param)
			} else if assert.NotNil(t, e.Error.Param) {
				assert.Equal(t, tc.param, *e.Error.Param)
			}
		})
	}
}

// TestBadInput_LargeBodyRefusedUnread: a 10 MB body gets 413 and the
// server goes on serving.
func TestBadInput_LargeBodyRefusedUnread(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Args: fast}, Options{})
	big := `{"prompt": "` + strings.Repeat("x", 10<<20) + `"}`
	status, e, _ := post(t, client(ts), ts.URL+"/v1/completions", big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status)
	assert.Contains(t, e.Error.Message, "larger than 4194304 bytes")
	status, _, _ = post(t, client(ts), ts.URL+"/v1/completions", `{"prompt": "still here", "max_tokens": 2}`)
	assert.Equal(t, http.StatusOK, status)
}

// TestBadInput_GarbageNeverPanics: bodies cut at every byte of valid
// requests, and random bytes, get a 4xx or a 200, never a 5xx or a
// dropped connection.
func TestBadInput_GarbageNeverPanics(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Args: fast}, Options{})
	valid := []string{
		`{"model":"mocker","prompt":[1,2,3],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2,"n":1}`,
	}
	var wg sync.WaitGroup
	for _, v := range valid {
		for cut := 0; cut <= len(v); cut += 3 {
			body := v[:cut]
			path := "/v1/completions"
			if strings.Contains(v, "messages") {
				path = "/v1/chat/completions"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client(ts).Post(ts.URL+path, "application/json", bytes.NewReader([]byte(body)))
				if !assert.NoError(t, err, body) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				assert.Less(t, resp.StatusCode, 500, "body %q", body)
			}()
		}
	}
	wg.Wait()
}

// TestErrors_AbortedHoldSaysSo: a prefill hold that no decode claims
// before kv_transfer_abort_timeout_ms ends the request with a 500 whose
// message names the abort; the abort is counted and nothing stays held.
func TestErrors_AbortedHoldSaysSo(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, abortConfig(), Options{})
	hc := client(ts)
	a := strandAndAbort(t, s, hc, ts.URL, func() sentAnswer {
		return send(hc, ts.URL+"/v1/completions", `{"prompt": [9,10,11,12,13,14,15,16,17], "max_tokens": 4}`)
	})
	require.NoError(t, a.err)
	assert.Equal(t, http.StatusInternalServerError, a.status)
	assert.Contains(t, a.e.Error.Message, "request aborted")
	assert.Contains(t, a.e.Error.Message, "kv_transfer_abort_timeout_ms")
	st := s.Cluster().Stats()
	assert.Equal(t, uint64(1), st.HoldsAborted)
	assert.Zero(t, st.HeldBlocks)
}

// abortConfig is a vLLM disaggregated cluster whose one decode worker
// runs one sequence at a time, and whose prefill gives a hold up after
// 20 modeled ms (1 ms of wall time; a long request's 16,000 tokens last
// seconds).
func abortConfig() cluster.Config {
	return cluster.Config{
		Disagg: true,
		Args:   map[string]any{"speedup_ratio": 20, "kv_transfer_abort_timeout_ms": 20},
		Decode: cluster.PoolConfig{Args: map[string]any{"max_num_seqs": 1}},
	}
}

// occupyDecode sends a request that takes abortConfig's one decode slot
// for seconds of wall time, and returns once it runs: the next request's
// prefill then holds its KV waiting for the decode until the hold aborts.
// The test ends the long request with end, once done with it.
func occupyDecode(t *testing.T, s *Server, hc *http.Client, url string) (end func()) {
	t.Helper()
	end = background(t, hc, url+"/v1/completions", `{"prompt": [1,2,3,4,5,6,7,8], "max_tokens": 16000}`)
	waitRunning(t, s, "decode-0")
	return end
}

// strandAndAbort runs send (a request, on its own goroutine) while
// abortConfig's one decode slot is taken: the request's prefill holds its
// KV until the hold aborts. The request learns of the abort only when its
// decode connects to the prefill (as a vLLM decode does), so once the
// cluster counts the abort, the slot is freed, and what send got is
// returned.
func strandAndAbort[T any](t *testing.T, s *Server, hc *http.Client, url string, send func() T) T {
	t.Helper()
	end := occupyDecode(t, s, hc, url)
	out := make(chan T, 1)
	go func() { out <- send() }()
	require.Eventually(t, func() bool { return s.Cluster().Stats().HoldsAborted > 0 }, 30*time.Second, time.Millisecond, "no hold aborted")
	end()
	return <-out
}

// background posts body until the test calls the function it returns,
// which cancels the request and waits for its end.
func background(t *testing.T, hc *http.Client, url, body string) (end func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitRunning waits until worker runs a request.
func waitRunning(t *testing.T, s *Server, worker string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, w := range s.Cluster().Stats().Workers {
			if w.Name == worker && w.Running > 0 {
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond, "%s never ran a request", worker)
}

// TestErrors_BusyIs429DrainingIs503: a request the router refuses because
// every worker is over its busy threshold gets 429; once the server
// drains, 503, and /health says so.
func TestErrors_BusyIs429DrainingIs503(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, cluster.Config{
		Workers:       1,
		Args:          map[string]any{"speedup_ratio": 1, "num_gpu_blocks": 64},
		RouterOptions: map[string]any{"busy_threshold": 0.5},
	}, Options{})
	hc := client(ts)
	// 40 of the 64 blocks: the worker is busy while it runs.
	ids := "[" + strings.Repeat("3,", 40*16-1) + "3]"
	end := background(t, hc, ts.URL+"/v1/completions", `{"prompt": `+ids+`, "max_tokens": 380}`)
	waitRunning(t, s, "worker-0")
	status, e, _ := post(t, hc, ts.URL+"/v1/completions", `{"prompt": [1,2,3], "max_tokens": 2}`)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, e.Error.Message, "all workers busy")
	// Refused before its first token, a stream keeps the status too.
	status, e, _ = post(t, hc, ts.URL+"/v1/completions", `{"prompt": [1,2,3], "max_tokens": 2, "stream": true}`)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, e.Error.Message, "all workers busy")
	end()
	assert.Equal(t, uint64(2), s.Cluster().Stats().PrefillRejections)

	_, err := s.Drain(t.Context())
	require.NoError(t, err)
	status, e, _ = post(t, hc, ts.URL+"/v1/completions", `{"prompt": [1,2,3], "max_tokens": 2}`)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, e.Error.Message, "draining")
	resp, err := hc.Get(ts.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}
