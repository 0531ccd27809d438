package serve

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// sdk is the official OpenAI Go client pointed at the test server.
func sdk(tsURL string, hc option.HTTPClient) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(tsURL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)
}

// longPrefix is a shared prompt start long enough to fill several KV
// blocks (16 tokens each) with the built-in tokenizer.
var longPrefix = strings.Repeat("The quick brown fox jumps over the lazy dog near the river bank. ", 8)

// TestOpenAISDK_CompletionsExactLengthAndCachedPrefix: the official SDK
// reads a completion of exactly max_tokens tokens; the second request
// sharing a text prefix reports the prefix's full blocks as cached.
func TestOpenAISDK_CompletionsExactLengthAndCachedPrefix(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Workers: 1, Args: fast}, Options{})
	c := sdk(ts.URL, client(ts))
	ctx := t.Context()
	var cached []int64
	for i, tail := range []string{"What is first?", "What is second?"} {
		comp, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     "mocker",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(longPrefix + tail)},
			MaxTokens: openai.Int(7),
		})
		require.NoError(t, err, "request %d", i)
		require.Len(t, comp.Choices, 1)
		assert.Equal(t, "length", string(comp.Choices[0].FinishReason))
		assert.Equal(t, int64(7), comp.Usage.CompletionTokens)
		assert.Len(t, strings.Fields(comp.Choices[0].Text), 7, "one filler word a token: %q", comp.Choices[0].Text)
		want := int64(len(Tokenize(longPrefix+tail, nil, nil)))
		assert.Equal(t, want, comp.Usage.PromptTokens)
		assert.Equal(t, comp.Usage.PromptTokens+comp.Usage.CompletionTokens, comp.Usage.TotalTokens)
		cached = append(cached, comp.Usage.PromptTokensDetails.CachedTokens)
	}
	assert.Zero(t, cached[0], "a cold cache")
	shared := sharedPrefixTokens(longPrefix+"What is first?", longPrefix+"What is second?")
	assert.Equal(t, int64(shared/16*16), cached[1], "the shared prefix's full blocks (%d shared tokens)", shared)
}

// sharedPrefixTokens counts the leading token ids two texts share.
func sharedPrefixTokens(a, b string) int {
	x, y := Tokenize(a, nil, nil), Tokenize(b, nil, nil)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

// TestOpenAISDK_ChatNonStreamed: a chat answer of max_completion_tokens
// tokens, as the assistant, with usage.
func TestOpenAISDK_ChatNonStreamed(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Args: fast}, Options{})
	c := sdk(ts.URL, client(ts))
	resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:               "mocker",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello there")},
		MaxCompletionTokens: openai.Int(5),
	})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, "assistant", string(resp.Choices[0].Message.Role))
	assert.Len(t, strings.Fields(resp.Choices[0].Message.Content), 5)
	assert.Equal(t, int64(5), resp.Usage.CompletionTokens)
	assert.Positive(t, resp.Usage.PromptTokens)
	assert.Equal(t, "chat.completion", string(resp.Object))
}

// TestOpenAISDK_ChatStreamedAccumulates: the SDK's stream accumulator
// rebuilds the same answer a non-streamed request gets, the usage chunk
// comes last with the counts, and every content chunk precedes it.
func TestOpenAISDK_ChatStreamedAccumulates(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Disagg: true, Args: fast}, Options{})
	c := sdk(ts.URL, client(ts))
	params := openai.ChatCompletionNewParams{
		Model:               "mocker",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage(longPrefix)},
		MaxCompletionTokens: openai.Int(12),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := c.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	chunks, usageChunks, contentChunks := 0, 0, 0
	for stream.Next() {
		ch := stream.Current()
		require.True(t, acc.AddChunk(ch))
		chunks++
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			contentChunks++
		}
		if ch.Usage.TotalTokens > 0 {
			usageChunks++
			assert.Empty(t, ch.Choices, "the usage chunk carries no choice")
		} else {
			assert.Zero(t, usageChunks, "a content chunk after the usage chunk")
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, 1, usageChunks)
	assert.GreaterOrEqual(t, chunks, 3, "role, content, finish and usage chunks")
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.Equal(t, int64(12), acc.Usage.CompletionTokens)
	assert.Equal(t, 12, contentChunks, "one chunk per token, as vLLM streams them")

	// The same request unstreamed gets the same text.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := c.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	assert.Equal(t, resp.Choices[0].Message.Content, acc.Choices[0].Message.Content)
	assert.Positive(t, resp.Usage.PromptTokensDetails.CachedTokens, "the second request hits the first's prefix")
}

// TestOpenAISDK_CompletionsStreamedTokenIDs: a prompt of token ids is used
// as it is, and a streamed completion delivers max_tokens words.
func TestOpenAISDK_CompletionsStreamedTokenIDs(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Engine: "sglang", Disagg: true, Args: fast}, Options{})
	c := sdk(ts.URL, client(ts))
	ids := make([]int64, 100)
	for i := range ids {
		ids[i] = int64(1000 + i)
	}
	stream := c.Completions.NewStreaming(t.Context(), openai.CompletionNewParams{
		Model:         "mocker",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
		MaxTokens:     openai.Int(9),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage openai.CompletionUsage
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		for _, choice := range ch.Choices {
			text.WriteString(choice.Text)
			if choice.FinishReason != "" {
				finish = string(choice.FinishReason)
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Len(t, strings.Fields(text.String()), 9)
	assert.Equal(t, "length", finish)
	assert.Equal(t, int64(100), usage.PromptTokens)
	assert.Equal(t, int64(9), usage.CompletionTokens)
}

// TestOpenAISDK_UnknownModelIs404: the SDK's error carries the status and
// vLLM's message.
func TestOpenAISDK_UnknownModelIs404(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Args: fast}, Options{})
	c := sdk(ts.URL, client(ts))
	_, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-nothing",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "The model `gpt-nothing` does not exist.")
}
