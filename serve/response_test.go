package serve

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/cluster"
)

// TestAppendJSONString_RoundTrips: whatever the text, the chunk's string
// decodes back to it.
func TestAppendJSONString_RoundTrips(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		var back string
		require.NoError(t, json.Unmarshal(appendJSONString(nil, s), &back))
		require.Equal(t, s, back)
	})
}

// TestAnswer_SameRequestSameText: filler depends on the seed and the
// prompt alone; echo repeats the prompt's pieces.
func TestAnswer_SameRequestSameText(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{Seed: 7}}
	p := &prepared{tokens: Tokenize("one two three", nil, nil)}
	a, b := s.answerFor(p).text(0, 12), s.answerFor(p).text(0, 12)
	require.Equal(t, a, b)
	q := &prepared{tokens: Tokenize("one two four", nil, nil)}
	require.NotEqual(t, a, s.answerFor(q).text(0, 12))
	var pieces []string
	Tokenize("say it again", nil, &pieces)
	e := &prepared{tokens: []uint32{1}, echo: pieces}
	require.Equal(t, "say it again say it", s.answerFor(e).text(0, 5))
}

// TestAppendResponse_MatchesEncodingJSON: the hand-written encoding of a
// non-streamed answer is byte for byte what encoding/json's Encoder
// writes, for completions and chats, with and without kv_transfer_params
// or TensorRT-LLM's disaggregated_params and prompt_token_ids, with text
// that needs escaping.
func TestAppendResponse_MatchesEncodingJSON(t *testing.T) {
	s := &Server{opts: Options{Model: `m<"odel">`}}
	res := cluster.Result{OutputTokens: 5, CachedTokens: 32}
	for _, chat := range []bool{false, true} {
		for _, echo := range [][]string{nil, {"a\"b", " <&>", "\n", " é", "\u2028"}} {
			for _, kv := range []string{"", "vllm", "trtllm"} {
				p := prepared{chat: chat, tokens: []uint32{1, 2, 3}, echo: echo}
				s.opts.Echo = echo != nil
				out := s.response(&p, &res, "cmpl-x\"y")
				switch kv {
				case "trtllm":
					id := int64(-3)
					out.Choices[0].DisaggregatedParams = &trtDisaggOut{RequestType: "context_only", CtxRequestID: 1 << 60, EncodedOpaqueState: "a+b/c=", DisaggRequestID: &id, CtxDPRank: 1}
					out.PromptTokenIDs = []uint32{1, 2, 4294967295}
				case "vllm":
					out.KVTransferParams = &kvParamsOut{DoRemotePrefill: true, RemoteBlockIDs: []int64{0, 1}, RemoteHost: "127.0.0.1", TransferToken: "t<k>"}
				}
				var want bytes.Buffer
				require.NoError(t, json.NewEncoder(&want).Encode(out))
				assert.Equal(t, want.String(), string(appendResponse(nil, &out)), "chat %v echo %v params %q", chat, echo != nil, kv)
			}
		}
	}
}
