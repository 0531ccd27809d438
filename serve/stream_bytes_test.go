package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kvstrand/mocker/cluster"
)

// The chunks of a stream as encoding/json writes them, for
// TestStream_BytesMatchEncodingJSON: vLLM's field order, nulls included.
type (
	refChunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []any  `json:"choices"`
		Usage   *usage `json:"usage,omitempty"`
	}
	refText struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		Logprobs     *int    `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
		StopReason   *int    `json:"stop_reason"`
	}
	refDelta struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content"`
	}
	refRole struct {
		Index        int      `json:"index"`
		Delta        refDelta `json:"delta"`
		Logprobs     *int     `json:"logprobs"`
		FinishReason *string  `json:"finish_reason"`
	}
	refDeltaChoice struct {
		Index        int      `json:"index"`
		Delta        refDelta `json:"delta"`
		Logprobs     *int     `json:"logprobs"`
		FinishReason *string  `json:"finish_reason"`
		StopReason   *int     `json:"stop_reason"`
	}
)

// refStream is the body a stream of p's answer, tokens long, must be:
// every chunk encoding/json's, then [DONE].
func refStream(t *testing.T, s *Server, p *prepared, id string, created int64, tokens int, cached int) string {
	t.Helper()
	ans := s.answerFor(p)
	obj := "text_completion"
	if p.chat {
		obj = "chat.completion.chunk"
	}
	var b strings.Builder
	put := func(c refChunk) {
		c.ID, c.Object, c.Created, c.Model = id, obj, created, s.opts.Model
		out, err := json.Marshal(c)
		assert.NoError(t, err)
		b.WriteString("data: ")
		b.Write(out)
		b.WriteString("\n\n")
	}
	if p.chat {
		put(refChunk{Choices: []any{refRole{Delta: refDelta{Role: "assistant"}}}})
	}
	for k := range tokens {
		var finish *string
		if k == tokens-1 {
			f := finishReason
			finish = &f
		}
		if p.chat {
			put(refChunk{Choices: []any{refDeltaChoice{Delta: refDelta{Content: ans.piece(k)}, FinishReason: finish}}})
		} else {
			put(refChunk{Choices: []any{refText{Text: ans.piece(k), FinishReason: finish}}})
		}
	}
	if p.includeUsage {
		res := cluster.Result{OutputTokens: tokens, CachedTokens: cached}
		u := usageOf(p, &res)
		put(refChunk{Choices: []any{}, Usage: &u})
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// TestStream_BytesMatchEncodingJSON: a stream's body, through the
// handler, is byte for byte the chunks encoding/json writes, for
// completions and chats, with and without the usage chunk, for filler
// and echoed text that needs escaping, id and model names included, with
// tokens heard one by one and in bursts (some larger than a chunker
// buffers before writing), over many streams at once on the same server
// (whose chunkers share a pool of buffers).
func TestStream_BytesMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, cluster.Config{Workers: 1, Args: fast}, Options{Model: `m<"odel">&`})
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() { streamMatches(t, s, i) })
	}
	wg.Wait()
}

// streamMatches streams the i-th of TestStream_BytesMatchEncodingJSON's
// requests and compares its body with encoding/json's.
func streamMatches(t *testing.T, s *Server, i int) {
	p := &prepared{chat: i%2 == 1, stream: true, includeUsage: i%3 != 0, tokens: []uint32{uint32(i), 2, 3}, maxTokens: 40 + 17*i}
	if i%4 >= 2 {
		p.echo = []string{"a\"b", " <&>", "\n", " é", "\u2028", " plain"}
	}
	tokens, cached := p.maxTokens, i
	burst := [...]int{1, 2, 5, 100, 1000}[i%5] // tokens heard together
	// The last tokens are heard only through the result, so that
	// the finish reason rides on the last token's chunk.
	run := func(_ context.Context, req cluster.Request) (cluster.Result, *apiError) {
		for k := 0; k < tokens-3; k += burst {
			for j := k; j < min(k+burst, tokens-3); j++ {
				req.OnToken(j, float64(j))
			}
			time.Sleep(50 * time.Microsecond)
		}
		return cluster.Result{Outcome: cluster.OutcomeCompleted, OutputTokens: tokens, CachedTokens: cached}, nil
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	id := "cmpl-" + strconv.Itoa(i) + `"<x>`
	s.stream(w, r, p, id, run)
	body := w.Body.String()
	// The one field encoding/json cannot know: the stream's own
	// creation second, the same in every chunk.
	var first struct {
		Created int64 `json:"created"`
	}
	line, _, _ := strings.Cut(strings.TrimPrefix(body, "data: "), "\n")
	if !assert.NoError(t, json.Unmarshal([]byte(line), &first), line) {
		return
	}
	assert.Equal(t, refStream(t, s, p, id, first.Created, tokens, cached), body, "stream %d (chat %v, usage %v, echo %v, burst %d)", i, p.chat, p.includeUsage, p.echo != nil, burst)
}
