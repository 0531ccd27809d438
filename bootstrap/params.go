package bootstrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// VLLMParams are the disaggregated params a vLLM-style prefill returns with
// its first token: where the decode finds the held KV. TransferToken is
// this project's addition to vLLM's fields: the secret that lets the
// decode in (see Server.Token).
type VLLMParams struct {
	TransferID    uint64 `json:"transfer_id"`
	PrefillHost   string `json:"prefill_host"`
	PrefillPort   int    `json:"prefill_port"`
	TransferToken Token  `json:"transfer_token"`
}

// Addr is the transfer server address to pass to Await.
func (p VLLMParams) Addr() string {
	return net.JoinHostPort(p.PrefillHost, strconv.Itoa(p.PrefillPort))
}

// Validate reports the first invalid field as a *ParamsError.
func (p VLLMParams) Validate() error {
	if p.TransferID == 0 {
		return paramsErr(kindVLLM, "transfer_id", "must be a non-zero integer")
	}
	if err := checkHost(kindVLLM, "prefill_host", p.PrefillHost); err != nil {
		return err
	}
	if err := checkPort(kindVLLM, "prefill_port", int64(p.PrefillPort)); err != nil {
		return err
	}
	if p.TransferToken.IsZero() {
		return paramsErr(kindVLLM, "transfer_token", "missing (or zero, which is never issued)")
	}
	return nil
}

// SGLangParams are SGLang's bootstrap coordinates for a disaggregated
// request. BootstrapToken is this project's addition to SGLang's fields:
// the secret that lets the decode in (see Server.Token).
type SGLangParams struct {
	BootstrapHost  string `json:"bootstrap_host"`
	BootstrapPort  int    `json:"bootstrap_port"`
	BootstrapRoom  uint64 `json:"bootstrap_room"`
	BootstrapToken Token  `json:"bootstrap_token"`
}

// Addr is the transfer server address to pass to Await.
func (p SGLangParams) Addr() string {
	return net.JoinHostPort(p.BootstrapHost, strconv.Itoa(p.BootstrapPort))
}

// Validate reports the first invalid field as a *ParamsError.
func (p SGLangParams) Validate() error {
	if err := checkHost(kindSGLang, "bootstrap_host", p.BootstrapHost); err != nil {
		return err
	}
	if err := checkPort(kindSGLang, "bootstrap_port", int64(p.BootstrapPort)); err != nil {
		return err
	}
	if p.BootstrapRoom == 0 {
		return paramsErr(kindSGLang, "bootstrap_room", "must be a non-zero integer")
	}
	if p.BootstrapToken.IsZero() {
		return paramsErr(kindSGLang, "bootstrap_token", "missing (or zero, which is never issued)")
	}
	return nil
}

const (
	kindVLLM   = "vllm"
	kindSGLang = "sglang"
)

// ErrBadParams matches (errors.Is) every *ParamsError.
var ErrBadParams = errors.New("malformed handoff params")

// ParamsError says which field of present handoff params is wrong. Callers
// must fail the request on it, never fall back to aggregated serving.
type ParamsError struct {
	Engine  string // "vllm" or "sglang"
	Field   string // JSON key; "" when the params are not an object at all
	Problem string
}

// Error reads "<engine> handoff params: <field>: <problem>".
func (e *ParamsError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s handoff params: %s", e.Engine, e.Problem)
	}
	return fmt.Sprintf("%s handoff params: %s: %s", e.Engine, e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrBadParams) true.
func (e *ParamsError) Is(target error) bool { return target == ErrBadParams }

func paramsErr(engine, field, problem string) error {
	return &ParamsError{Engine: engine, Field: field, Problem: problem}
}

// ParseVLLMParams reads vLLM handoff params from a request. raw may be
// json.RawMessage or []byte (JSON text), map[string]any (already decoded
// JSON, numbers as float64 or json.Number, or Go integers from a script
// runtime), VLLMParams or *VLLMParams. present is false only for nil, empty
// or JSON null: the request is aggregated. Anything else must be a complete,
// valid object, or the error (a *ParamsError) names the field. Unknown keys
// are ignored so newer senders stay readable.
func ParseVLLMParams(raw any) (p VLLMParams, present bool, err error) {
	switch v := raw.(type) {
	case VLLMParams:
		return v, true, v.Validate()
	case *VLLMParams:
		if v == nil {
			return VLLMParams{}, false, nil
		}
		return *v, true, v.Validate()
	}
	m, present, err := paramsObject(kindVLLM, raw)
	if !present || err != nil {
		return VLLMParams{}, present, err
	}
	if p.TransferID, err = uintField(kindVLLM, m, "transfer_id"); err != nil {
		return VLLMParams{}, true, err
	}
	if p.PrefillHost, err = stringField(kindVLLM, m, "prefill_host"); err != nil {
		return VLLMParams{}, true, err
	}
	port, err := uintField(kindVLLM, m, "prefill_port")
	if err != nil {
		return VLLMParams{}, true, err
	}
	if err := checkWirePort(kindVLLM, "prefill_port", port); err != nil {
		return VLLMParams{}, true, err
	}
	p.PrefillPort = int(port)
	if p.TransferToken, err = tokenField(kindVLLM, m, "transfer_token"); err != nil {
		return VLLMParams{}, true, err
	}
	if err := p.Validate(); err != nil {
		return VLLMParams{}, true, err
	}
	return p, true, nil
}

// ParseSGLangParams is ParseVLLMParams for SGLang's
// {bootstrap_host, bootstrap_port, bootstrap_room}, with the same rules.
func ParseSGLangParams(raw any) (p SGLangParams, present bool, err error) {
	switch v := raw.(type) {
	case SGLangParams:
		return v, true, v.Validate()
	case *SGLangParams:
		if v == nil {
			return SGLangParams{}, false, nil
		}
		return *v, true, v.Validate()
	}
	m, present, err := paramsObject(kindSGLang, raw)
	if !present || err != nil {
		return SGLangParams{}, present, err
	}
	if p.BootstrapHost, err = stringField(kindSGLang, m, "bootstrap_host"); err != nil {
		return SGLangParams{}, true, err
	}
	port, err := uintField(kindSGLang, m, "bootstrap_port")
	if err != nil {
		return SGLangParams{}, true, err
	}
	if err := checkWirePort(kindSGLang, "bootstrap_port", port); err != nil {
		return SGLangParams{}, true, err
	}
	p.BootstrapPort = int(port)
	if p.BootstrapRoom, err = uintField(kindSGLang, m, "bootstrap_room"); err != nil {
		return SGLangParams{}, true, err
	}
	if p.BootstrapToken, err = tokenField(kindSGLang, m, "bootstrap_token"); err != nil {
		return SGLangParams{}, true, err
	}
	if err := p.Validate(); err != nil {
		return SGLangParams{}, true, err
	}
	return p, true, nil
}

func paramsObject(engine string, raw any) (map[string]any, bool, error) {
	var text []byte
	switch v := raw.(type) {
	case nil:
		return nil, false, nil
	case map[string]any:
		if v == nil {
			return nil, false, nil
		}
		return v, true, nil
	case json.RawMessage:
		text = v
	case []byte:
		text = v
	default:
		return nil, true, paramsErr(engine, "", fmt.Sprintf("must be a JSON object, got %T", raw))
	}
	text = bytes.TrimSpace(text)
	if len(text) == 0 || string(text) == "null" {
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var decoded any
	if err := dec.Decode(&decoded); err != nil {
		return nil, true, paramsErr(engine, "", "invalid JSON: "+err.Error())
	}
	if dec.More() {
		return nil, true, paramsErr(engine, "", "trailing data after the JSON object")
	}
	m, ok := decoded.(map[string]any)
	if !ok {
		return nil, true, paramsErr(engine, "", fmt.Sprintf("must be a JSON object, got %s", jsonKind(decoded)))
	}
	return m, true, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// uintField reads a non-negative integer field of the params. A float
// beyond 2^53 may already have been rounded by whoever decoded it, so it
// is refused (jsonval.AsUint) rather than silently pointed at another
// transfer.
func uintField(engine string, m map[string]any, field string) (uint64, error) {
	v, ok := m[field]
	if !ok {
		return 0, paramsErr(engine, field, "missing")
	}
	u, ok := jsonval.AsUint(v)
	if !ok {
		got := jsonKind(v)
		if _, isNum := jsonval.AsFloat(v); isNum {
			got = jsonval.Describe(v)
		}
		return 0, paramsErr(engine, field, "must be a non-negative integer, got "+got)
	}
	return u, nil
}

func stringField(engine string, m map[string]any, field string) (string, error) {
	v, ok := m[field]
	if !ok {
		return "", paramsErr(engine, field, "missing")
	}
	s, ok := v.(string)
	if !ok {
		return "", paramsErr(engine, field, "must be a string, got "+jsonKind(v))
	}
	return s, checkHost(engine, field, s)
}

func tokenField(engine string, m map[string]any, field string) (Token, error) {
	v, ok := m[field]
	if !ok {
		// Validate names a missing token after the fields before it.
		return Token{}, nil
	}
	var t Token
	switch x := v.(type) {
	case string:
		var err error
		if t, err = ParseToken(x); err != nil {
			return Token{}, paramsErr(engine, field, err.Error())
		}
	case Token:
		t = x
	default:
		return Token{}, paramsErr(engine, field, "must be a string of 32 hex digits, got "+jsonKind(v))
	}
	return t, nil
}

func checkHost(engine, field, host string) error {
	if host == "" {
		return paramsErr(engine, field, "must be a non-empty host name or IP")
	}
	if isUnspecifiedHost(host) {
		return paramsErr(engine, field, fmt.Sprintf("%q is an unspecified address; the prefill worker must advertise a host decode workers can reach", host))
	}
	return nil
}

func checkPort(engine, field string, port int64) error {
	if port < 1 || port > 65535 {
		return paramsErr(engine, field, fmt.Sprintf("must be an integer in 1..65535, got %d", port))
	}
	return nil
}

func checkWirePort(engine, field string, port uint64) error {
	if port < 1 || port > 65535 {
		return paramsErr(engine, field, fmt.Sprintf("must be an integer in 1..65535, got %d", port))
	}
	return nil
}
