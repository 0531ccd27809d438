package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// TensorRT-LLM's P/D over HTTP. Its OpenAI server takes a request's
// disaggregated_params (tensorrt_llm/serve/openai_protocol.py): a router
// sends the context (prefill) worker request_type "context_only", reads
// the disaggregated_params of the answer's choice, sets their
// request_type to "generation_only" and sends them with the request to a
// generation (decode) worker. What the context half hands out travels in
// encoded_opaque_state, base64 bytes only the engine reads; Dynamo's
// TensorRT-LLM worker carries the same bytes as opaque_state. A trtllm
// cluster's worker ports take this form as well as vLLM's
// kv_transfer_params, and answer a prefill in the form it was asked in.

// Request types of disaggregated_params.
const (
	trtContextOnly    = "context_only"
	trtGenerationOnly = "generation_only"
	trtWhole          = "context_and_generation"
)

// trtDisaggParams is the part of a request's disaggregated_params mocker
// reads; the rest (first_gen_tokens, ctx_request_id, draft_tokens, …) is
// ignored, as the decode needs only the opaque state.
type trtDisaggParams struct {
	RequestType        *string `json:"request_type"`
	EncodedOpaqueState *string `json:"encoded_opaque_state"`
	OpaqueState        *string `json:"opaque_state"`
	DisaggRequestID    *int64  `json:"disagg_request_id"`
}

// trtDisaggOut is the disaggregated_params of a context-only answer's
// choice, with TensorRT-LLM's fields: ctx_request_id is the transfer's id,
// encoded_opaque_state the base64 of mocker's opaque state (opaqueState),
// ctx_dp_rank the prefill's data-parallel rank, disagg_request_id the
// request's own echoed. first_gen_tokens and draft_tokens are null: the
// mock's answers carry text, not token ids, and its decode needs neither.
type trtDisaggOut struct {
	RequestType        string   `json:"request_type"`
	FirstGenTokens     []uint32 `json:"first_gen_tokens"`
	CtxRequestID       uint64   `json:"ctx_request_id"`
	EncodedOpaqueState string   `json:"encoded_opaque_state"`
	DraftTokens        []uint32 `json:"draft_tokens"`
	DisaggRequestID    *int64   `json:"disagg_request_id"`
	CtxDPRank          int      `json:"ctx_dp_rank"`
}

// opaqueState is what encoded_opaque_state encodes (as JSON): the fields
// of kv_transfer_params that say where the held KV is and prove the
// handout, under the same keys.
type opaqueState struct {
	TransferID     uint64 `json:"transfer_id"`
	TransferToken  string `json:"transfer_token"`
	RemoteHost     string `json:"remote_host"`
	RemotePort     int    `json:"remote_port"`
	RemoteEngineID string `json:"remote_engine_id"`
}

func (o *opaqueState) encode() string {
	b, _ := json.Marshal(o) // plain fields: always marshals
	return base64.StdEncoding.EncodeToString(b)
}

// absentJSON says raw is no value: missing or null.
func absentJSON(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// pdParams reads a request's P/D params: kv_transfer_params, or for a
// trtllm cluster disaggregated_params, read into the same form.
func (s *Server) pdParams(req *openaiRequest) (kvTransferParams, *apiError) {
	if s.engine != "trtllm" || absentJSON(req.DisaggregatedParams) {
		return parseKVParams(req.KVTransferParams)
	}
	if !absentJSON(req.KVTransferParams) {
		return kvTransferParams{}, newAPIError(http.StatusBadRequest, "disaggregated_params",
			"disaggregated_params: send kv_transfer_params (vLLM's form) or disaggregated_params (TensorRT-LLM's), not both")
	}
	return parseDisaggParams(req.DisaggregatedParams)
}

// parseDisaggParams reads disaggregated_params as the kv_transfer_params
// they stand for: context_only asks for a prefill for a remote decode,
// generation_only for a decode of the handout its opaque state encodes,
// context_and_generation for a whole request.
func parseDisaggParams(raw json.RawMessage) (kvTransferParams, *apiError) {
	k := kvTransferParams{trtllm: true}
	bad := func(field, msg string) (kvTransferParams, *apiError) {
		p := "disaggregated_params." + field
		return k, newAPIError(http.StatusBadRequest, p, p+": "+msg)
	}
	var d trtDisaggParams
	if err := json.Unmarshal(raw, &d); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return bad(te.Field, fmt.Sprintf("want %s, got %s", typeName(te.Type.String()), te.Value))
		}
		return k, newAPIError(http.StatusBadRequest, "disaggregated_params", "disaggregated_params: want an object: "+err.Error())
	}
	if d.RequestType == nil {
		return bad("request_type", fmt.Sprintf("required: %s, %s or %s", trtContextOnly, trtGenerationOnly, trtWhole))
	}
	yes := true
	switch *d.RequestType {
	case trtContextOnly:
		k.DoRemoteDecode = &yes
		k.disaggRequestID = d.DisaggRequestID
	case trtGenerationOnly:
		k.DoRemotePrefill = &yes
		state, field := d.EncodedOpaqueState, "encoded_opaque_state"
		if state == nil {
			state, field = d.OpaqueState, "opaque_state"
		}
		if state == nil {
			return bad("encoded_opaque_state", "required with generation_only; send the disaggregated_params the context worker returned")
		}
		b, err := base64.StdEncoding.DecodeString(*state)
		if err != nil {
			return bad(field, "not the base64 the context worker returned: "+err.Error())
		}
		var o struct {
			TransferID    *uint64 `json:"transfer_id"`
			TransferToken *string `json:"transfer_token"`
			RemoteHost    *string `json:"remote_host"`
			RemotePort    *int64  `json:"remote_port"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return bad(field, "not an opaque state this server handed out: "+err.Error())
		}
		k.TransferID, k.TransferToken, k.RemoteHost, k.RemotePort = o.TransferID, o.TransferToken, o.RemoteHost, o.RemotePort
		k.stateField = field
	case trtWhole:
	default:
		return bad("request_type", fmt.Sprintf("want %s, %s or %s, got %q", trtContextOnly, trtGenerationOnly, trtWhole, *d.RequestType))
	}
	return k, nil
}
