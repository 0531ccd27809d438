package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/cluster"
)

// Worker is one worker rank's own endpoint: the OpenAI API answered by
// that rank alone (the cluster's router does not place its requests) and
// its own /metrics, for an outside router that picks workers itself.
// Workers lists them in the order of the cluster's Stats, which is the
// order `mocker serve --worker-ports BASE` gives them ports in (BASE + i).
type Worker struct {
	Name   string // the worker's name: "worker-0", "prefill-1", "decode-0"
	DPRank int    // its data-parallel rank
	Role   string // "aggregated", "prefill" or "decode"
	// Handler serves POST /v1/completions and /v1/chat/completions, GET
	// /v1/models, /health and /metrics (the rank's series, and the
	// cluster-wide mocker_* ones).
	Handler http.Handler
}

// Workers are the server's per-worker endpoints.
func (s *Server) Workers() []Worker { return s.workers }

// workerEndpoint is a Worker as the handlers see it.
type workerEndpoint struct {
	target cluster.Target
	role   string
}

func (s *Server) buildWorkers() {
	targets, roles := s.c.Targets()
	for i, t := range targets {
		ep := &workerEndpoint{target: t, role: roles[i]}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false, ep) })
		mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true, ep) })
		mux.HandleFunc("GET /v1/models", s.models)
		mux.HandleFunc("GET /health", s.health)
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.workerGatherer(t), promhttp.HandlerOpts{}))
		s.workers = append(s.workers, Worker{Name: t.Worker, DPRank: t.DPRank, Role: roles[i], Handler: mux})
	}
}

// workerGatherer gathers the series of rank t (labels worker and engine)
// and those that belong to no worker (mocker's cluster-wide ones).
func (s *Server) workerGatherer(t cluster.Target) prometheus.Gatherer {
	rank := strconv.Itoa(t.DPRank)
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := s.reg.Gather()
		out := fams[:0]
		for _, f := range fams {
			kept := f.Metric[:0]
			for _, m := range f.Metric {
				worker, engine, labelled := "", "", false
				for _, l := range m.Label {
					switch l.GetName() {
					case "worker":
						worker, labelled = l.GetValue(), true
					case "engine":
						engine = l.GetValue()
					}
				}
				if !labelled || (worker == t.Worker && engine == rank) {
					kept = append(kept, m)
				}
			}
			if len(kept) > 0 {
				f.Metric = kept
				out = append(out, f)
			}
		}
		return out, err
	})
}

// kvTransferParams is a request's kv_transfer_params, as vLLM's
// NixlConnector reads them, with mocker's two additions: transfer_id and
// transfer_token, which the prefill hands out and the decode must present
// (the token is what the prefill's transfer server checks).
type kvTransferParams struct {
	DoRemoteDecode  *bool   `json:"do_remote_decode"`
	DoRemotePrefill *bool   `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int64  `json:"remote_port"`
	TransferID      *uint64 `json:"transfer_id"`
	TransferToken   *string `json:"transfer_token"`
	// trtllm marks params read from TensorRT-LLM's disaggregated_params
	// (parseDisaggParams); stateField names the field their handout came
	// in, and disaggRequestID is a context request's, to echo.
	trtllm          bool
	stateField      string
	disaggRequestID *int64
}

// param is the request field k came from, for errors.
func (k *kvTransferParams) param() string {
	if k.trtllm {
		return "disaggregated_params"
	}
	return "kv_transfer_params"
}

func (k *kvTransferParams) remoteDecode() bool { return k.DoRemoteDecode != nil && *k.DoRemoteDecode }
func (k *kvTransferParams) remotePrefill() bool {
	return k.DoRemotePrefill != nil && *k.DoRemotePrefill
}

// kvParamsOut is the kv_transfer_params a prefill with do_remote_decode
// answers: vLLM's fields (remote_engine_id, remote_block_ids, remote_host
// and remote_port of the transfer endpoint, tp_size, remote_request_id)
// and mocker's transfer_id and transfer_token. A decode given them back
// verbatim takes the KV over.
type kvParamsOut struct {
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
	RemoteRequestID string  `json:"remote_request_id"`
	TransferID      uint64  `json:"transfer_id"`
	TransferToken   string  `json:"transfer_token"`
}

// parseKVParams reads kv_transfer_params; absent or null is the zero value.
func parseKVParams(raw json.RawMessage) (kvTransferParams, *apiError) {
	var k kvTransferParams
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return k, nil
	}
	if err := json.Unmarshal(raw, &k); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			param := "kv_transfer_params." + te.Field
			return k, newAPIError(http.StatusBadRequest, param, fmt.Sprintf("%s: want %s, got %s", param, typeName(te.Type.String()), te.Value))
		}
		return k, newAPIError(http.StatusBadRequest, "kv_transfer_params", "kv_transfer_params: want an object: "+err.Error())
	}
	return k, nil
}

// engineID names a rank as remote_engine_id does.
func engineID(t cluster.Target) string {
	if t.DPRank == 0 {
		return t.Worker
	}
	return fmt.Sprintf("%s-dp%d", t.Worker, t.DPRank)
}

// claimOf reads a decode's claim from the params its prefill returned,
// naming the field that is missing or wrong.
func claimOf(k *kvTransferParams) (cluster.Claim, *apiError) {
	missing := func(f, what string) *apiError {
		if k.trtllm {
			p := "disaggregated_params." + k.stateField
			return newAPIError(http.StatusBadRequest, p, fmt.Sprintf("%s: %s %s; send the disaggregated_params the context worker returned, as they are", p, f, what))
		}
		p := "kv_transfer_params." + f
		return newAPIError(http.StatusBadRequest, p, fmt.Sprintf("%s: %s; send the kv_transfer_params the prefill returned, as they are", p, what))
	}
	var cl cluster.Claim
	switch {
	case k.TransferID == nil || *k.TransferID == 0:
		return cl, missing("transfer_id", "required, the non-zero id the prefill returned")
	case k.TransferToken == nil:
		return cl, missing("transfer_token", "required")
	case k.RemoteHost == nil || *k.RemoteHost == "":
		return cl, missing("remote_host", "required")
	case k.RemotePort == nil || *k.RemotePort < 1 || *k.RemotePort > 65535:
		return cl, missing("remote_port", "required, a port in [1, 65535]")
	}
	tok, err := bootstrap.ParseToken(*k.TransferToken)
	if err != nil {
		return cl, missing("transfer_token", err.Error())
	}
	return cluster.Claim{TransferID: *k.TransferID, Host: *k.RemoteHost, Port: int(*k.RemotePort), Token: tok}, nil
}

// claimStatus is the HTTP status of a refused claim.
func claimStatus(code cluster.ClaimCode) int {
	switch code {
	case cluster.ClaimUnknown:
		return http.StatusNotFound
	case cluster.ClaimSpent, cluster.ClaimExpired:
		return http.StatusGone
	default:
		return http.StatusBadRequest
	}
}

// runner runs a prepared request on the cluster: through its router, or
// on one worker.
type runner func(ctx context.Context, req cluster.Request) (cluster.Result, *apiError)

// placed picks how a request sent to ep's own endpoint runs, from its
// kv_transfer_params: an aggregated worker runs whole requests, a prefill
// worker prefills for a remote decode (do_remote_decode), a decode worker
// decodes with the params a prefill returned (do_remote_prefill).
func (s *Server) placed(ep *workerEndpoint, k *kvTransferParams, p *prepared) (runner, *apiError) {
	t := ep.target
	trt := s.engine == "trtllm"
	switch ep.role {
	case "prefill":
		if !k.remoteDecode() {
			how := `kv_transfer_params {"do_remote_decode": true}`
			if trt {
				how += ` or disaggregated_params {"request_type": "context_only"}`
			}
			return nil, newAPIError(http.StatusBadRequest, k.param(), fmt.Sprintf(
				"%s is a prefill worker: send it %s and the returned params to a decode worker", t, how))
		}
		if p.stream {
			return nil, newAPIError(http.StatusBadRequest, "stream", "stream: a prefill for a remote decode is answered whole; send stream: false (the decode streams)")
		}
		p.prefillHalf = true
		p.trtllm, p.disaggRequestID = k.trtllm, k.disaggRequestID
		return nil, nil
	case "decode":
		if !k.remotePrefill() {
			how := "the kv_transfer_params a prefill worker returned (do_remote_prefill: true)"
			if trt {
				how += `, or the disaggregated_params it returned with request_type "generation_only"`
			}
			return nil, newAPIError(http.StatusBadRequest, k.param(), fmt.Sprintf("%s is a decode worker: send it %s", t, how))
		}
		cl, e := claimOf(k)
		if e != nil {
			return nil, e
		}
		p.decodeHalf = true
		return func(ctx context.Context, req cluster.Request) (cluster.Result, *apiError) {
			res, err := s.c.Decode(ctx, t, cl, req)
			var ce *cluster.ClaimError
			if errors.As(err, &ce) {
				return res, newAPIError(claimStatus(ce.Code), k.param(), k.param()+": "+ce.Msg)
			}
			return res, s.resultError(&res)
		}, nil
	default:
		if k.remoteDecode() || k.remotePrefill() {
			if k.trtllm {
				return nil, newAPIError(http.StatusBadRequest, k.param(), fmt.Sprintf(
					"%s is an aggregated worker: it runs whole requests; send context_only to a prefill worker, generation_only to a decode worker", t))
			}
			return nil, newAPIError(http.StatusBadRequest, "kv_transfer_params", fmt.Sprintf(
				"%s is an aggregated worker: it runs whole requests; send do_remote_decode to a prefill worker, do_remote_prefill to a decode worker", t))
		}
		return func(ctx context.Context, req cluster.Request) (cluster.Result, *apiError) {
			res := s.c.GenerateOn(ctx, t, req)
			return res, s.resultError(&res)
		}, nil
	}
}

// prefillHalf answers a prefill for a remote decode: the prompt is
// prefilled and its KV held on the worker, and the answer carries its
// first token and the kv_transfer_params a decode needs to take it over.
func (s *Server) prefillHalf(w http.ResponseWriter, r *http.Request, p *prepared, id string, ep *workerEndpoint) {
	ho, ok, res := s.c.Prefill(r.Context(), ep.target, cluster.Request{Tokens: p.tokens, MaxTokens: 1})
	modeledHeaders(w.Header(), &res)
	if !ok {
		s.m.observe(p, &res)
		e := s.resultError(&res)
		if e == nil {
			e = newAPIError(http.StatusInternalServerError, "", "request failed: "+res.Error)
		}
		s.logFailure(id, e)
		writeError(w, e)
		return
	}
	s.m.observePrompt(p, &res)
	blocks := make([]int64, ho.Blocks)
	for i := range blocks {
		blocks[i] = int64(i)
	}
	out := s.response(p, &res, id)
	if p.trtllm {
		state := opaqueState{TransferID: ho.TransferID, TransferToken: ho.Token.String(), RemoteHost: ho.Host, RemotePort: ho.Port, RemoteEngineID: engineID(ho.Source)}
		out.Choices[0].DisaggregatedParams = &trtDisaggOut{
			RequestType: trtContextOnly, CtxRequestID: ho.TransferID, EncodedOpaqueState: state.encode(),
			DisaggRequestID: p.disaggRequestID, CtxDPRank: ho.Source.DPRank,
		}
		// As TensorRT-LLM's answer, so that a router can send the
		// generation worker the prompt as ids.
		out.PromptTokenIDs = p.tokens
		writeResponse(w, &out)
		return
	}
	out.KVTransferParams = &kvParamsOut{
		DoRemotePrefill: true, RemoteEngineID: engineID(ho.Source), RemoteBlockIDs: blocks,
		RemoteHost: ho.Host, RemotePort: ho.Port, TPSize: 1, RemoteRequestID: id,
		TransferID: ho.TransferID, TransferToken: ho.Token.String(),
	}
	writeResponse(w, &out)
}
