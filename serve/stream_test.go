package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// TestStream_StalledClientLagsAlone: a client that stops reading a long
// stream (its socket buffers fill and the handler's writes block) does
// not stop the cluster: another request completes meanwhile, and the
// stalled stream still delivers every token once read, its lag measured.
func TestStream_StalledClientLagsAlone(t *testing.T) {
	t.Parallel()
	const tokens = 20000 // about 4 MB of chunks, past loopback buffers
	_, ts := startServer(t, cluster.Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 4096}}, Options{})
	hc := client(ts)
	resp, err := hc.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "stall here", "max_tokens": 20000, "stream": true, "stream_options": {"include_usage": true}}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	// Not reading the stream, another request is served to the end.
	status, _, body := post(t, hc, ts.URL+"/v1/completions", `{"prompt": "meanwhile", "max_tokens": 3}`)
	require.Equal(t, http.StatusOK, status, "%s", body)

	words, chunks := 0, 0
	var u *usage
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		require.False(t, done, "nothing after [DONE]")
		if line == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ch))
		for _, c := range ch.Choices {
			words += len(strings.Fields(c.Text))
		}
		chunks++
		if ch.Usage != nil {
			u = ch.Usage
		}
	}
	require.NoError(t, sc.Err())
	assert.True(t, done, "the stream ends with [DONE]")
	assert.Equal(t, tokens, words)
	require.NotNil(t, u)
	assert.Equal(t, tokens, u.CompletionTokens)
	f := scrape(t, hc, ts.URL)
	h := f["mocker_stream_lag_seconds"].Metric[0].Histogram
	assert.Positive(t, h.GetSampleCount())
	assert.LessOrEqual(t, h.GetSampleCount(), uint64(chunks), "one lag sample per chunk of tokens")
}

// TestStream_ErrorAfterFirstTokenIsAnErrorChunk: a stream whose request
// fails after its first token (the prefill's, before its hold aborts)
// stays 200 and ends with an error data line, then [DONE], as vLLM's.
func TestStream_ErrorAfterFirstTokenIsAnErrorChunk(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, abortConfig(), Options{})
	hc := client(ts)
	// The prefill's first token is the stream's first: the hold aborts
	// after it, so the stream carries it, then the error chunk.
	type streamed struct {
		status int
		lines  []string
		err    error
	}
	got := strandAndAbort(t, s, hc, ts.URL, func() (r streamed) {
		resp, err := hc.Post(ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt": [9,10,11,12,13,14,15,16,17], "max_tokens": 4, "stream": true}`))
		if err != nil {
			return streamed{err: err}
		}
		defer resp.Body.Close()
		r.status = resp.StatusCode
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				r.lines = append(r.lines, l)
			}
		}
		r.err = sc.Err()
		return r
	})
	require.NoError(t, got.err)
	lines := got.lines
	require.Equal(t, http.StatusOK, got.status)
	require.GreaterOrEqual(t, len(lines), 2)
	assert.Equal(t, "[DONE]", lines[len(lines)-1])
	var e errorBody
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-2]), &e))
	assert.Contains(t, e.Error.Message, "request aborted")
}

// flushCounter is a recorded response that counts its flushes.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() {
	f.flushes++
	f.ResponseRecorder.Flush()
}

// TestStream_TokensWithinAGrainShareAWrite: tokens that come faster than
// the pacing grain leave in one write per grain, not one each; every
// token is still its own chunk, the last one carries the finish reason,
// and the stream ends with [DONE].
func TestStream_TokensWithinAGrainShareAWrite(t *testing.T) {
	t.Parallel()
	const tokens = 64
	s, _ := startServer(t, cluster.Config{Workers: 1, Args: fast}, Options{})
	var elapsed time.Duration
	// A runner that makes a token about every 50 µs, far inside the
	// grain, as a fast paced loop does.
	run := func(_ context.Context, req cluster.Request) (cluster.Result, *apiError) {
		start := time.Now()
		for i := range tokens {
			req.OnToken(i, float64(i))
			time.Sleep(50 * time.Microsecond)
		}
		elapsed = time.Since(start)
		return cluster.Result{Outcome: cluster.OutcomeCompleted, OutputTokens: tokens}, nil
	}
	w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	s.stream(w, r, &prepared{stream: true, tokens: []uint32{1, 2, 3}, maxTokens: tokens}, "cmpl-grain", run)

	// The writes: at most one per grain over the tokens' span, the first
	// token's, and the end's ([DONE] after the results).
	bound := int(elapsed/cluster.PaceSlack) + 3
	assert.LessOrEqual(t, w.flushes, bound, "one write per grain over %v, not one per token", elapsed)
	var texts, finished int
	var last string
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = line
		if line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ch), line)
		require.Len(t, ch.Choices, 1)
		if ch.Choices[0].Text != "" {
			texts++
		}
		if ch.Choices[0].FinishReason != nil {
			finished++
			assert.Equal(t, finishReason, *ch.Choices[0].FinishReason)
		}
	}
	assert.Equal(t, tokens, texts, "one chunk per token")
	assert.Equal(t, 1, finished, "one chunk ends the choice")
	assert.Equal(t, "[DONE]", last)
}
