package serve

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zeebo/xxh3"

	"github.com/kvstrand/mocker/cluster"
)

// fillerWords are what answers are made of outside echo mode: one word a
// token.
var fillerWords = [...]string{
	"the", "cache", "holds", "blocks", "while", "decode", "waits", "for", "room", "and",
	"prefill", "keeps", "its", "KV", "pinned", "until", "a", "transfer", "ends", "or",
	"aborts", "at", "timeout", "so", "later", "requests", "queue", "behind", "it", "in",
	"turn", "each", "token", "arrives", "on", "time", "as", "modeled", "by", "the",
	"engine", "with", "no", "GPU", "at", "all", "router", "picks", "worker", "load",
	"prefix", "hits", "save", "compute", "batch", "grows", "then", "shrinks", "again", "now",
	"stream", "flows", "steady", "still",
}

// spacedFillerWords are fillerWords each after a space: a piece past the
// first, without building it.
var spacedFillerWords = func() (sp [len(fillerWords)]string) {
	for i, w := range fillerWords {
		sp[i] = " " + w
	}
	return sp
}()

// answer makes a request's output text, one piece per token: the prompt's
// pieces in echo mode, otherwise filler words drawn from the server's seed
// and the prompt, so the same request gets the same answer.
type answer struct {
	echo []string
	seed uint64
}

func (s *Server) answerFor(p *prepared) answer {
	a := answer{echo: p.echo}
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], s.opts.Seed)
	h := xxh3.New()
	_, _ = h.Write(buf[:])
	for _, t := range p.tokens[:min(len(p.tokens), 64)] {
		binary.LittleEndian.PutUint32(buf[:4], t)
		_, _ = h.Write(buf[:4])
	}
	a.seed = h.Sum64()
	return a
}

// piece is the text of output token k.
func (a answer) piece(k int) string {
	if len(a.echo) > 0 {
		p := a.echo[k%len(a.echo)]
		switch {
		case k == 0:
			p = strings.TrimLeft(p, " \t\r\n")
		case k%len(a.echo) == 0 && strings.TrimLeft(p, " \t\r\n") == p:
			p = " " + p // the text starts over: a space from its end
		}
		return p
	}
	x := a.seed + uint64(k)*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	if k == 0 {
		return fillerWords[x%uint64(len(fillerWords))]
	}
	return spacedFillerWords[x%uint64(len(fillerWords))]
}

// text is the output of tokens [from, to).
func (a answer) text(from, to int) string {
	if to <= from {
		return ""
	}
	// Pieces are short: eight bytes each, a guess that mostly holds.
	b := make([]byte, 0, 8*(to-from))
	for k := from; k < to; k++ {
		b = append(b, a.piece(k)...)
	}
	return string(b)
}

// usage is OpenAI's usage object, with the prefix-cache hit as
// prompt_tokens_details.cached_tokens.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	PromptTokensDetails *tokenDetails `json:"prompt_tokens_details"`
}

type tokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func usageOf(p *prepared, res *cluster.Result) usage {
	return usage{
		PromptTokens:        len(p.tokens),
		CompletionTokens:    res.OutputTokens,
		TotalTokens:         len(p.tokens) + res.OutputTokens,
		PromptTokensDetails: &tokenDetails{CachedTokens: res.CachedTokens},
	}
}

type chatMsgOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

type choiceOut struct {
	Index        int         `json:"index"`
	Text         *string     `json:"text,omitempty"`
	Message      *chatMsgOut `json:"message,omitempty"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   any         `json:"stop_reason"`
	// DisaggregatedParams are a TensorRT-LLM-style prefill's for its
	// remote decode.
	DisaggregatedParams *trtDisaggOut `json:"disaggregated_params,omitempty"`
}

type responseOut struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []choiceOut `json:"choices"`
	Usage   usage       `json:"usage"`
	// PromptTokenIDs are the prompt's ids, in a TensorRT-LLM-style
	// prefill's answer.
	PromptTokenIDs []uint32 `json:"prompt_token_ids,omitempty"`
	// KVTransferParams is a prefill's for its remote decode.
	KVTransferParams *kvParamsOut `json:"kv_transfer_params,omitempty"`
}

// finishReason is "length": the mock always generates max_tokens unless a
// limit cuts it, and both end by length.
const finishReason = "length"

// response is a non-streamed answer.
func (s *Server) response(p *prepared, res *cluster.Result, id string) responseOut {
	text := s.answerFor(p).text(0, res.OutputTokens)
	ch := choiceOut{FinishReason: finishReason}
	out := responseOut{ID: id, Created: time.Now().Unix(), Model: s.opts.Model, Usage: usageOf(p, res)}
	if p.chat {
		out.Object = "chat.completion"
		ch.Message = &chatMsgOut{Role: "assistant", Content: text, ToolCalls: []any{}}
	} else {
		out.Object = "text_completion"
		ch.Text = &text
	}
	out.Choices = []choiceOut{ch}
	return out
}

// appendJSONString appends s as a JSON string: as it is when nothing in
// it needs escaping (filler words never do), else as encoding/json writes
// it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// writeResponse writes a non-streamed answer with status 200: the bytes
// writeJSON would write for out, appended by hand rather than through
// reflection (the answer's shape is fixed).
func writeResponse(w http.ResponseWriter, out *responseOut) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(appendResponse(make([]byte, 0, 512), out))
}

// appendResponse appends out as encoding/json's Encoder writes it,
// newline included.
func appendResponse(b []byte, out *responseOut) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, out.ID)
	b = append(b, `,"object":`...)
	b = appendJSONString(b, out.Object)
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, out.Created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, out.Model)
	b = append(b, `,"choices":`...)
	if out.Choices == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range out.Choices {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendChoice(b, &out.Choices[i])
		}
		b = append(b, ']')
	}
	u := &out.Usage
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"prompt_tokens_details":`...)
	if u.PromptTokensDetails == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokensDetails.CachedTokens), 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	if len(out.PromptTokenIDs) > 0 {
		b = append(b, `,"prompt_token_ids":[`...)
		for i, id := range out.PromptTokenIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(id), 10)
		}
		b = append(b, ']')
	}
	if out.KVTransferParams != nil {
		kv, _ := json.Marshal(out.KVTransferParams) // plain fields: always marshals
		b = append(b, `,"kv_transfer_params":`...)
		b = append(b, kv...)
	}
	return append(b, "}\n"...)
}

func appendChoice(b []byte, ch *choiceOut) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(ch.Index), 10)
	if ch.Text != nil {
		b = append(b, `,"text":`...)
		b = appendJSONString(b, *ch.Text)
	}
	if m := ch.Message; m != nil {
		b = append(b, `,"message":{"role":`...)
		b = appendJSONString(b, m.Role)
		b = append(b, `,"content":`...)
		b = appendJSONString(b, m.Content)
		b = append(b, `,"tool_calls":`...)
		b = appendAny(b, m.ToolCalls)
		b = append(b, '}')
	}
	b = append(b, `,"logprobs":`...)
	b = appendAny(b, ch.Logprobs)
	b = append(b, `,"finish_reason":`...)
	b = appendJSONString(b, ch.FinishReason)
	b = append(b, `,"stop_reason":`...)
	b = appendAny(b, ch.StopReason)
	if ch.DisaggregatedParams != nil {
		dp, _ := json.Marshal(ch.DisaggregatedParams) // plain fields: always marshals
		b = append(b, `,"disaggregated_params":`...)
		b = append(b, dp...)
	}
	return append(b, '}')
}

// appendAny appends v as encoding/json writes it: the common empty values
// by hand, anything else through json.Marshal (with the Encoder's HTML
// escaping, which Marshal shares).
func appendAny(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case []any:
		if v == nil {
			return append(b, "null"...)
		}
		if len(v) == 0 {
			return append(b, "[]"...)
		}
	}
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}
