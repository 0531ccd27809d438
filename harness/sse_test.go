package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newOpenAIServer is a small OpenAI-like server: GET /v1/models and a
// streaming POST /v1/chat/completions that sends `tokens` chunks `gap`
// apart, then [DONE]. It counts the chunks it sent.
func newOpenAIServer(t testing.TB, tokens int, gap time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"mock","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream {
			http.Error(w, "want a JSON body with stream: true", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range tokens {
			if gap > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(gap):
				}
			}
			fmt.Fprintf(w, "id: %d\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i, i)
			fl.Flush()
			sent.Add(1)
		}
		_, _ = io.WriteString(w, ": end of stream\ndata: [DONE]\n\n")
		fl.Flush()
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 1\nevent: greet\ndata: hello\ndata: world\n\nid: 2\ndata: second\n\n: a comment\nid: 3\nevent: bye\ndata: last\n\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &sent
}

func TestSSE_EventsCarryIDNameAndData(t *testing.T) {
	t.Parallel()
	srv, _ := newOpenAIServer(t, 0, 0)
	for _, module := range []string{"k6/x/sse", "k6/experimental/sse"} {
		res := runScript(t, fmt.Sprintf(`
import sse from '%s';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const got = [];
  let opened = false;
  const res = sse.open(__ENV.BASE_URL + '/events', {}, (client) => {
    client.on('open', () => { opened = true; });
    client.on('event', (e) => { got.push([e.id, e.name, e.data]); if (e.id === '3') client.close(); });
  });
  check(null, {
    'opened': () => opened && res.status === 200,
    'three events': () => got.length === 3,
    'multi-line data joined': () => got[0][0] === '1' && got[0][1] === 'greet' && got[0][2] === 'hello\nworld',
    'unnamed event': () => got[1][1] === '' && got[1][2] === 'second',
    'last': () => got[2][1] === 'bye' && got[2][2] === 'last',
  });
}
`, module), func(c *Config) { c.Env = map[string]string{"BASE_URL": srv.URL} })
		require.NoError(t, res.err, res.stderr)
		assert.Equal(t, 5.0, res.metric(t, "checks", "passes"), module)
		assert.Equal(t, 3.0, res.metric(t, "sse_event", "count"), module)
		assert.Equal(t, 1.0, res.metric(t, "http_reqs", "count"), module)
	}
}

func TestSSE_EventsBehaveAsPlainObjects(t *testing.T) {
	t.Parallel()
	srv, _ := newOpenAIServer(t, 0, 0)
	res := runScript(t, `
import sse from 'k6/x/sse';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const kept = [];
  sse.open(__ENV.BASE_URL + '/events', {}, (client) => {
    client.on('event', (e) => { kept.push(e); if (e.id === '3') client.close(); });
  });
  kept[1].seen = true;
  delete kept[2].name;
  check(null, {
    'kept events keep their fields': () => kept.map((e) => e.id).join() === '1,2,3' && kept[0].data === 'hello\nworld',
    'stringified as k6/x/sse has them': () => JSON.stringify(kept[0]) === '{"id":"1","name":"greet","data":"hello\\nworld"}',
    'keys': () => Object.keys(kept[0]).join() === 'id,name,data',
    'a set property is kept': () => kept[1].seen === true && Object.keys(kept[1]).join() === 'id,name,data,seen',
    'a deleted one is gone': () => !('name' in kept[2]) && kept[2].name === undefined && 'data' in kept[2],
    'spread copies the fields': () => ({ ...kept[2] }).data === 'last',
  });
}
`, func(c *Config) { c.Env = map[string]string{"BASE_URL": srv.URL} })
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 6.0, res.metric(t, "checks", "passes"))
	assert.Zero(t, res.metric(t, "checks", "fails"), res.stderr)
}

func TestSSE_ErrorHandlerGetsRefusedConnection(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import sse from 'k6/x/sse';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  let msg = '';
  const res = sse.open('http://127.0.0.1:1/events', {}, (client) => { client.on('error', (e) => { msg = e.error(); }); });
  check(null, { 'error reported': () => msg.includes('connection refused') && res.status === 0 && res.error === msg });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 1.0, res.metric(t, "checks", "passes"))
}

func TestSSE_RefusedAtInitOnTheVirtualClock(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import sse from 'k6/x/sse';
export default function () {}
`, func(c *Config) { c.Clock = ClockVirtual })
	require.Equal(t, ExitInvalidConfig, ExitCode(res.err))
	assert.Contains(t, res.err.Error(), `"k6/x/sse"`)
}

// TestOpenAIScript_MeasuresEveryToken runs scripts/http/openai.js against the
// OpenAI-like server: every streamed chunk is one token in the script's
// counters, TTFT has one sample per completion and ITL one per later
// token, and its thresholds pass.
func TestOpenAIScript_MeasuresEveryToken(t *testing.T) {
	t.Parallel()
	const tokens = 8
	srv, sent := newOpenAIServer(t, tokens, time.Millisecond)
	res := runFile(t, "../scripts/http/openai.js", func(c *Config) {
		c.Env = map[string]string{"BASE_URL": srv.URL, "VUS": "2", "DURATION": "1s"}
	})
	require.NoError(t, res.err, res.stderr)
	completions := res.metric(t, "llm_completed", "passes")
	require.Positive(t, completions)
	assert.Zero(t, res.metric(t, "llm_completed", "fails"))
	assert.Equal(t, float64(sent.Load()), res.metric(t, "llm_output_tokens", "count"))
	assert.Equal(t, completions*tokens, res.metric(t, "sse_event", "count")-completions, "sse_event counts the chunks and [DONE]")
	assert.Equal(t, completions*tokens, res.metric(t, "llm_output_tokens", "count"))
	assert.Zero(t, res.metric(t, "checks", "fails"))
}

// TestSSE_StreamOnThePacedClock: on the paced clock a stream's events
// arrive as on the wall clock, and the wait for them is script time.
func TestSSE_StreamOnThePacedClock(t *testing.T) {
	t.Parallel()
	srv, sent := newOpenAIServer(t, 5, 30*time.Millisecond)
	res := runFile(t, "../scripts/http/openai.js", func(c *Config) {
		c.Clock = ClockPaced
		c.Env = map[string]string{"BASE_URL": srv.URL, "VUS": "2", "DURATION": "1s"}
	})
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, float64(sent.Load()), res.metric(t, "llm_output_tokens", "count"))
	assert.GreaterOrEqual(t, res.metric(t, "llm_ttft", "min"), 30.0, "the first token comes after the server's first gap, on the run's clock")
	// One gap can look short after a late one; the stream as a whole
	// cannot be quicker than its five gaps.
	assert.GreaterOrEqual(t, res.metric(t, "llm_request_duration", "min"), 150.0, "a completion lasts at least its five gaps")
}
