package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// openaiRequest is the part of a completions or chat completions body the
// mock reads; other fields are ignored, as vLLM ignores them.
type openaiRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	N                   *int64          `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	KVTransferParams    json.RawMessage `json:"kv_transfer_params"`
	// DisaggregatedParams are TensorRT-LLM's P/D params (trtllm only).
	DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
	// promptIDs are Prompt's token ids when decodeCommon read them.
	promptIDs []uint32
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// prepared is a request checked and tokenized, ready for the cluster.
type prepared struct {
	chat         bool
	stream       bool
	includeUsage bool
	tokens       []uint32
	maxTokens    int
	// echo is the text whose pieces the answer repeats in echo mode.
	echo []string
	// prefillHalf and decodeHalf mark the two halves of a request
	// disaggregated over HTTP (kv_transfer_params): the prefill's counts
	// its prompt, the decode's its output.
	prefillHalf, decodeHalf bool
	// trtllm marks a P/D half asked for in TensorRT-LLM's form
	// (disaggregated_params), which the prefill half answers in.
	trtllm bool
	// disaggRequestID is the context request's disagg_request_id, echoed.
	disaggRequestID *int64
}

// decodeRequest reads body into req; a malformed body or a field of the
// wrong type is a 400 naming what to fix.
func decodeRequest(body []byte, req *openaiRequest) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return newAPIError(http.StatusBadRequest, "", "empty request body: send a JSON object")
	}
	if decodeCommon(body, req) {
		return nil
	}
	*req = openaiRequest{}
	if err := json.Unmarshal(body, req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				return newAPIError(http.StatusBadRequest, "", fmt.Sprintf("request body: want a JSON object, got %s", te.Value))
			}
			return newAPIError(http.StatusBadRequest, field, fmt.Sprintf("%s: want %s, got %s", field, typeName(te.Type.String()), te.Value))
		}
		return newAPIError(http.StatusBadRequest, "", fmt.Sprintf("invalid JSON body: %v", err))
	}
	return nil
}

// typeName says a Go type as a JSON type.
func typeName(t string) string {
	switch {
	case strings.Contains(t, "int"):
		return "an integer"
	case strings.Contains(t, "bool"):
		return "a boolean"
	case strings.Contains(t, "string"):
		return "a string"
	case strings.HasPrefix(t, "[]") || strings.HasPrefix(t, "*[]"):
		return "an array"
	default:
		return "an object"
	}
}

// prepare checks req against the served model and its context length and
// tokenizes its prompt.
func (s *Server) prepare(req *openaiRequest, chat bool) (prepared, *apiError) {
	p := prepared{chat: chat}
	if req.Model != "" && req.Model != s.opts.Model {
		return p, newAPIError(http.StatusNotFound, "model", fmt.Sprintf("The model `%s` does not exist.", req.Model))
	}
	if req.N != nil && *req.N != 1 {
		return p, newAPIError(http.StatusBadRequest, "n", fmt.Sprintf("n: only n=1 is supported (one choice per request), got %d", *req.N))
	}
	p.stream = req.Stream != nil && *req.Stream
	if req.StreamOptions != nil {
		if !p.stream {
			return p, newAPIError(http.StatusBadRequest, "stream_options", "stream_options: allowed only with stream: true")
		}
		// vLLM: once stream_options is given, include_usage defaults to true.
		p.includeUsage = req.StreamOptions.IncludeUsage == nil || *req.StreamOptions.IncludeUsage
	}
	var err *apiError
	if chat {
		p.tokens, p.echo, err = s.chatPrompt(req.Messages)
	} else {
		if req.promptIDs != nil {
			p.tokens = req.promptIDs
		} else {
			p.tokens, p.echo, err = s.completionPrompt(req.Prompt)
		}
	}
	if err != nil {
		return p, err
	}
	limit := s.maxModelLen
	prompt := len(p.tokens)
	if prompt >= limit {
		return p, newAPIError(http.StatusBadRequest, "prompt", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", limit, prompt))
	}
	maxTok, param := req.MaxTokens, "max_tokens"
	if chat && req.MaxCompletionTokens != nil {
		maxTok, param = req.MaxCompletionTokens, "max_completion_tokens"
	}
	switch {
	case maxTok != nil:
		if *maxTok < 1 {
			return p, newAPIError(http.StatusBadRequest, param, fmt.Sprintf("%s: want an integer ≥ 1, got %d", param, *maxTok))
		}
		if *maxTok > int64(limit-prompt) {
			return p, newAPIError(http.StatusBadRequest, param, fmt.Sprintf(
				"'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
				*maxTok, limit, prompt, *maxTok, limit, prompt))
		}
		p.maxTokens = int(*maxTok)
	case chat:
		p.maxTokens = limit - prompt
	default:
		p.maxTokens = min(defaultMaxTokens, limit-prompt)
	}
	return p, nil
}

// defaultMaxTokens is a completion's max_tokens when the body gives none,
// as in vLLM.
const defaultMaxTokens = 16

// completionPrompt reads prompt: a string, an array of one string, an
// array of token ids, or an array of one array of token ids.
func (s *Server) completionPrompt(raw json.RawMessage) ([]uint32, []string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil, newAPIError(http.StatusBadRequest, "prompt", "prompt: required (a string or an array of token ids)")
	}
	bad := func(what string) *apiError {
		return newAPIError(http.StatusBadRequest, "prompt", "prompt: "+what)
	}
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, nil, bad(err.Error())
		}
		return s.textPrompt(text)
	case '[':
	default:
		return nil, nil, bad("want a string or an array of token ids")
	}
	if inner := bytes.TrimSpace(raw[1:]); len(inner) > 0 && (inner[0] >= '0' && inner[0] <= '9') {
		// Token ids, the common case, read at once; the item by item
		// walk below only names the culprit when this fails.
		if ids, ok := parseTokenIDs(raw); ok {
			return ids, nil, nil
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, bad(err.Error())
	}
	if len(items) == 0 {
		return nil, nil, bad("empty; send a string or at least one token id")
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		if len(items) > 1 {
			return nil, nil, bad(fmt.Sprintf("batched prompts are not supported (%d given); send one prompt per request", len(items)))
		}
		return s.completionPrompt(first)
	}
	ids := make([]uint32, len(items))
	for i, it := range items {
		var f float64
		if err := json.Unmarshal(it, &f); err != nil || f != math.Trunc(f) || f < 0 || f > math.MaxUint32 {
			return nil, nil, bad(fmt.Sprintf("token id %d: want an integer in [0, %d], got %s", i, uint32(math.MaxUint32), it))
		}
		ids[i] = uint32(f)
	}
	return ids, nil, nil
}

// textPrompt tokenizes a text prompt.
func (s *Server) textPrompt(text string) ([]uint32, []string, *apiError) {
	if text == "" {
		return nil, nil, newAPIError(http.StatusBadRequest, "prompt", "prompt: empty; send at least one character")
	}
	var pieces []string
	var echo *[]string
	if s.opts.Echo {
		echo = &pieces
	}
	return Tokenize(text, nil, echo), pieces, nil
}

// chatPrompt renders messages with a fixed template (a role marker, the
// content, a newline each, then the assistant's marker) and tokenizes the
// result; echo mode answers with the last user message.
func (s *Server) chatPrompt(msgs []chatMessage) ([]uint32, []string, *apiError) {
	if len(msgs) == 0 {
		return nil, nil, newAPIError(http.StatusBadRequest, "messages", "messages: required, at least one message")
	}
	var b strings.Builder
	last := ""
	for i, m := range msgs {
		if m.Role == "" {
			return nil, nil, newAPIError(http.StatusBadRequest, "messages", fmt.Sprintf("messages[%d].role: required", i))
		}
		text, err := contentText(m.Content)
		if err != "" {
			return nil, nil, newAPIError(http.StatusBadRequest, "messages", fmt.Sprintf("messages[%d].content: %s", i, err))
		}
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(text)
		b.WriteString("\n")
		if m.Role == "user" {
			last = text
		}
	}
	b.WriteString("<|assistant|>\n")
	ids := Tokenize(b.String(), nil, nil)
	var echo []string
	if s.opts.Echo {
		Tokenize(last, nil, &echo)
	}
	return ids, echo, nil
}

// contentText is a message's text: a string, null, or an array of parts
// whose text parts are joined.
func contentText(raw json.RawMessage) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", ""
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err.Error()
		}
		return s, ""
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", "want a string or an array of {type: \"text\", text} parts"
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Sprintf("part %d: type %q is not supported; only text", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), ""
}

// parseTokenIDs reads raw, a JSON array, as token ids when it holds only
// plain integers in [0, MaxUint32] (no sign, fraction, exponent or leading
// zero): the common prompt, read without reflection. ok is false for
// anything else, which completionPrompt then reads item by item.
func parseTokenIDs(raw []byte) (ids []uint32, ok bool) {
	i, n := 0, len(raw)
	space := func() {
		for i < n && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
			i++
		}
	}
	space()
	if i == n || raw[i] != '[' {
		return nil, false
	}
	i++
	ids = make([]uint32, 0, bytes.Count(raw, []byte{','})+1)
	for {
		space()
		if i == n || raw[i] < '0' || raw[i] > '9' {
			return nil, false
		}
		start := i
		var v uint64
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			v = v*10 + uint64(raw[i]-'0')
			if v > math.MaxUint32 {
				return nil, false
			}
			i++
		}
		if raw[start] == '0' && i-start > 1 {
			return nil, false
		}
		ids = append(ids, uint32(v))
		space()
		if i == n {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i++
		case ']':
			i++
			space()
			return ids, i == n
		default:
			return nil, false
		}
	}
}

// decodeCommon reads body into req when it is a valid JSON object of the
// common fields in their common forms (model a plain string, prompt
// and kv_transfer_params and disaggregated_params any value, max_tokens, max_completion_tokens and
// n plain integers, stream a boolean; any other key that is not one of
// these in another case is ignored, as encoding/json ignores it), without
// reflection. ok is false for anything else (messages, stream_options,
// nulls, escapes, keys matched only case-insensitively), which
// encoding/json then reads with its own errors; req may be partly filled.
func decodeCommon(body []byte, req *openaiRequest) (ok bool) {
	d := scan{b: body}
	d.space()
	if !d.eat('{') {
		return false
	}
	d.space()
	if d.eat('}') {
		return d.end()
	}
	for {
		d.space()
		key, ok := d.plainString()
		if !ok {
			return false
		}
		d.space()
		if !d.eat(':') {
			return false
		}
		d.space()
		switch key {
		case "model":
			if req.Model, ok = d.plainString(); !ok {
				return false
			}
		case "prompt":
			req.Prompt = d.value()
			// Token ids, checked as they are read; any other prompt
			// only checked here, read by completionPrompt.
			if req.promptIDs, ok = parseTokenIDs(req.Prompt); !ok && !json.Valid(req.Prompt) {
				return false
			}
		case "kv_transfer_params":
			if req.KVTransferParams = d.value(); !json.Valid(req.KVTransferParams) {
				return false
			}
		case "disaggregated_params":
			if req.DisaggregatedParams = d.value(); !json.Valid(req.DisaggregatedParams) {
				return false
			}
		case "max_tokens":
			if req.MaxTokens, ok = d.int(); !ok {
				return false
			}
		case "max_completion_tokens":
			if req.MaxCompletionTokens, ok = d.int(); !ok {
				return false
			}
		case "n":
			if req.N, ok = d.int(); !ok {
				return false
			}
		case "stream":
			v := d.value()
			switch string(v) {
			case "true", "false":
				b := v[0] == 't'
				req.Stream = &b
			default:
				return false
			}
		default:
			for _, known := range requestKeys {
				if strings.EqualFold(key, known) {
					return false // encoding/json matches keys in any case
				}
			}
			if !json.Valid(d.value()) {
				return false
			}
		}
		d.space()
		if d.eat('}') {
			return d.end()
		}
		if !d.eat(',') {
			return false
		}
	}
}

// requestKeys are openaiRequest's JSON keys.
var requestKeys = [...]string{"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options", "kv_transfer_params", "disaggregated_params"}

// scan walks JSON: value finds a value's end without checking it, the
// other readers check what they read.
type scan struct {
	b []byte
	i int
}

func (d *scan) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

func (d *scan) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (d *scan) end() bool {
	d.space()
	return d.i == len(d.b)
}

// plainString reads a string without escapes or bytes outside ASCII's
// printable range (ok false for any other value).
func (d *scan) plainString() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
	}
	return "", false
}

// int reads a plain integer (no fraction or exponent) that fits an int64.
func (d *scan) int() (*int64, bool) {
	v := d.value()
	if len(v) == 0 || len(v) > 18 {
		return nil, false
	}
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) > 1 && v[0] == '0' {
		return nil, false // a leading zero: not JSON
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return nil, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return &n, len(v) > 0
}

// value skips one value and returns its bytes (up to the end of the
// body, if the value is cut short: its reader then refuses it).
func (d *scan) value() []byte {
	start := d.i
	depth := 0
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			d.i++
		case '[', '{':
			depth++
			d.i++
		case ']', '}':
			if depth == 0 {
				return d.cut(start)
			}
			depth--
			d.i++
		case ',':
			if depth == 0 {
				return d.cut(start)
			}
			d.i++
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return d.cut(start)
			}
			d.i++
		default:
			d.i++
		}
		if depth == 0 && d.i > start && (d.b[start] == '"' || d.b[start] == '[' || d.b[start] == '{') {
			return d.cut(start)
		}
	}
	return d.cut(start)
}

// cut is the value from start to where the walk stopped, the body's end
// at most.
func (d *scan) cut(start int) []byte {
	d.i = min(d.i, len(d.b))
	return d.b[start:d.i]
}
