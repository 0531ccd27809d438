package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zeebo/xxh3"

	"github.com/kvstrand/mocker/cluster"
)

// Defaults of Options, in one place.
const (
	DefaultModel  = "mocker"
	DefaultListen = "127.0.0.1:8000"
	// DefaultMaxBodyBytes bounds a request body: far above any prompt the
	// cluster takes as text, and a 10 MB body is refused before it is
	// parsed.
	DefaultMaxBodyBytes = 4 << 20
)

// Options say how a Server answers, apart from its cluster's config.
type Options struct {
	// Model is the one model name served (default DefaultModel); a
	// request naming another gets 404.
	Model string
	// Seed picks the filler words of the answers.
	Seed uint64
	// Echo answers with the prompt's own word pieces (a chat's last user
	// message), repeated to length, instead of filler.
	Echo bool
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Logger receives diagnostics, such as why a request failed, at debug
	// level (default: discard).
	Logger *slog.Logger
	// FailureInjectionRate is the percentage [0, 100] of requests answered
	// with an injected error instead (FailureTypes), for testing a client's
	// retries; a request can also ask for one by name (HeaderFail).
	FailureInjectionRate float64
	// FailureTypes are the errors injected at random (default: all).
	FailureTypes []string
	// KVEvents publishes every worker rank's KV events over ZMQ as vLLM
	// does, when its Endpoint is set (kvevents.go).
	KVEvents KVEventsOptions
}

// Server answers OpenAI's completions and chat completions APIs from an
// in-process mock cluster, and serves the cluster's state as Prometheus
// metrics under vLLM's or SGLang's names. Build it with New, serve its
// Handler, end it with Close.
type Server struct {
	c           *cluster.Cluster
	opts        Options
	engine      string
	maxModelLen int
	reg         *prometheus.Registry
	m           *metrics
	mux         *http.ServeMux
	created     int64
	seq         atomic.Uint64
	draining    atomic.Bool
	inject      *injector
	workers     []Worker
	route       runner    // s.routed, bound once rather than per request
	kv          *kvEvents // nil without KVEvents.Endpoint
}

// New starts the cluster cfg describes, paced against the wall clock at
// its speedup_ratio, with every worker reporting each token as produced so
// that streams carry them at their modeled instants.
func New(cfg cluster.Config, opts Options) (*Server, error) {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if r := opts.FailureInjectionRate; r < 0 || r > 100 || r != r {
		return nil, fmt.Errorf("failure_injection_rate: want a percentage in [0, 100], got %v", r)
	}
	for _, k := range opts.FailureTypes {
		if !slices.Contains(FailureTypes, k) {
			return nil, fmt.Errorf("failure_types: %q: want one of %s", k, strings.Join(FailureTypes, ", "))
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.StreamTokens = true
	kvev, err := kvEventsFor(&cfg, opts)
	if err != nil {
		return nil, err
	}
	c, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{c: c, opts: opts, engine: c.Config().Engine, maxModelLen: c.MaxModelLen(), created: time.Now().Unix(),
		inject: newInjector(opts.FailureInjectionRate, opts.FailureTypes, opts.Seed), kv: kvev}
	if err := s.startKVEvents(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if s.engine == "" {
		s.engine = cluster.DefaultEngine
	}
	s.reg = prometheus.NewRegistry()
	s.m = newMetrics(s)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.route = s.routed
	s.buildWorkers()
	return s, nil
}

// Handler is the server's HTTP API.
func (s *Server) Handler() http.Handler { return s.mux }

// Cluster is the cluster behind the server.
func (s *Server) Cluster() *cluster.Cluster { return s.c }

// Drain refuses new requests (503) and waits for those in flight to end
// or ctx to be done; /health answers 503 from then on.
func (s *Server) Drain(ctx context.Context) (cluster.Stats, error) {
	s.draining.Store(true)
	return s.c.Drain(ctx)
}

// Close stops the cluster; requests still in flight end with an error.
func (s *Server) Close() error {
	s.draining.Store(true)
	err := s.c.Close()
	if s.kv != nil {
		s.kv.close()
	}
	return err
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	body := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: s.opts.Model, Object: "model", Created: s.created, OwnedBy: "mocker", Root: s.opts.Model, MaxModelLen: s.maxModelLen}}}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// generate serves /v1/completions and /v1/chat/completions through the
// cluster's router.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	s.serveGenerate(w, r, chat, nil)
}

// errDraining answers a new request once the server drains.
var errDraining = newAPIError(http.StatusServiceUnavailable, "", "the server is draining: it takes no new requests")

// routed runs a request where the cluster's router places it.
func (s *Server) routed(ctx context.Context, req cluster.Request) (cluster.Result, *apiError) {
	res := s.c.Generate(ctx, req)
	return res, s.resultError(&res)
}

// serveGenerate answers a completion or chat completion: through the
// router (ep nil) or on the worker ep names.
func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool, ep *workerEndpoint) {
	// A decode worker still takes the decodes of prefills already held
	// while draining: they are the second half of requests in flight.
	decodeEP := ep != nil && ep.role == "decode"
	if s.draining.Load() && !decodeEP {
		writeError(w, errDraining)
		return
	}
	body, err := readBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, newAPIError(http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)))
			return
		}
		writeError(w, newAPIError(http.StatusBadRequest, "", fmt.Sprintf("reading the request body: %v", err)))
		return
	}
	var req openaiRequest
	if e := decodeRequest(body, &req); e != nil {
		writeError(w, e)
		return
	}
	if e := s.inject.fail(r, s.opts.Model); e != nil {
		s.m.injected.WithLabelValues(e.Type).Inc()
		if e.Code == http.StatusTooManyRequests || e.Code >= 500 {
			// The wait a retrying client honours (OpenAI's SDKs read
			// it): short, so a test of its retries runs quickly.
			w.Header().Set("Retry-After-Ms", injectedRetryAfterMs)
		}
		writeError(w, e)
		return
	}
	p, e := s.prepare(&req, chat)
	if e != nil {
		writeError(w, e)
		return
	}
	kv, e := s.pdParams(&req)
	if e != nil {
		writeError(w, e)
		return
	}
	if decodeEP && !kv.remotePrefill() && s.draining.Load() {
		writeError(w, errDraining)
		return
	}
	run := s.route
	if ep == nil {
		if kv.remoteDecode() || kv.remotePrefill() {
			writeError(w, newAPIError(http.StatusBadRequest, kv.param(),
				kv.param()+": P/D over HTTP goes to the workers' own endpoints (mocker serve --worker-ports); this one routes whole requests"))
			return
		}
	} else if run, e = s.placed(ep, &kv, &p); e != nil {
		writeError(w, e)
		return
	}
	id := s.responseID(r, chat)
	if p.prefillHalf {
		s.prefillHalf(w, r, &p, id, ep)
		return
	}
	if p.stream {
		s.stream(w, r, &p, id, run)
		return
	}
	res, e := run(r.Context(), cluster.Request{Tokens: p.tokens, MaxTokens: p.maxTokens})
	s.m.observe(&p, &res)
	modeledHeaders(w.Header(), &res)
	if e != nil {
		s.logFailure(id, e)
		writeError(w, e)
		return
	}
	out := s.response(&p, &res, id)
	writeResponse(w, &out)
}

// readBody reads r's body, at most limit bytes, into a buffer sized once
// from its Content-Length when it gives one within the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n >= 0 && n < limit {
		buf := make([]byte, 0, n+1) // +1: the read that sees the end
		for {
			m, err := body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if err == io.EOF {
				return buf, nil
			}
			if err != nil {
				return buf, err
			}
			if len(buf) == cap(buf) {
				// Longer than it said: read the rest as it comes.
				rest, err := io.ReadAll(body)
				return append(buf, rest...), err
			}
		}
	}
	return io.ReadAll(body)
}

// Headers of a non-streamed answer that give the model's own latencies in
// modeled ms, for a load tool to compare with what it measured.
const (
	HeaderTTFT  = "X-Mocker-Ttft-Ms"
	HeaderE2E   = "X-Mocker-E2e-Ms"
	HeaderQueue = "X-Mocker-Queue-Ms"
	// HeaderHold and HeaderTransfer come with a request whose prefill held
	// its KV for a decode once the hold ended: how long it was held, and
	// the modeled transfer.
	HeaderHold     = "X-Mocker-Hold-Ms"
	HeaderTransfer = "X-Mocker-Transfer-Ms"
)

func modeledHeaders(h http.Header, res *cluster.Result) {
	if res.HoldOutcome != "" {
		h.Set(HeaderHold, strconv.FormatFloat(res.HoldMs, 'f', 3, 64))
		h.Set(HeaderTransfer, strconv.FormatFloat(res.TransferMs, 'f', 3, 64))
	}
	if res.OutputTokens == 0 {
		return
	}
	// The common three in one string and one slice, each value a part of
	// them (the names are in canonical form, as Set would make them).
	var buf [96]byte
	b := strconv.AppendFloat(buf[:0], res.TTFTMs, 'f', 3, 64)
	ttft := len(b)
	b = strconv.AppendFloat(b, res.QueueMs, 'f', 3, 64)
	queue := len(b)
	if res.E2EMs > 0 {
		b = strconv.AppendFloat(b, res.E2EMs, 'f', 3, 64)
	}
	all := string(b)
	vals := make([]string, 3)
	vals[0], vals[1], vals[2] = all[:ttft], all[ttft:queue], all[queue:]
	h[HeaderTTFT] = vals[0:1:1]
	h[HeaderQueue] = vals[1:2:2]
	if res.E2EMs > 0 {
		h[HeaderE2E] = vals[2:3:3]
	}
}

// responseID is cmpl- or chatcmpl- and the X-Request-Id header, or a
// number of the server's own.
func (s *Server) responseID(r *http.Request, chat bool) string {
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	if h := r.Header.Get("X-Request-Id"); h != "" && len(h) <= 256 {
		return prefix + h
	}
	n := s.seq.Add(1)
	// The hash of "n/seed" in decimal, then n in hex, built on the stack.
	var kb, ib [48]byte
	k := strconv.AppendUint(kb[:0], n, 10)
	k = strconv.AppendUint(append(k, '/'), s.opts.Seed, 10)
	id := append(ib[:0], prefix...)
	id = strconv.AppendUint(id, xxh3.Hash(k), 16)
	return string(strconv.AppendUint(id, n, 16))
}

// logFailure says on the server's log why a request the cluster took did
// not complete.
func (s *Server) logFailure(id string, e *apiError) {
	s.opts.Logger.Debug("request failed", "id", id, "status", e.Code, "error", e.Message)
}

// resultError is the API error of a request that did not complete.
func (s *Server) resultError(res *cluster.Result) *apiError {
	switch res.Outcome {
	case cluster.OutcomeCompleted:
		return nil
	case cluster.OutcomeAborted:
		return newAPIError(http.StatusInternalServerError, "", fmt.Sprintf(
			"request aborted: prefill worker %s held its KV for %.0f modeled ms until its abort timeout (kv_transfer_abort_timeout_ms) before decode worker %s took it: %s",
			res.PrefillWorker, res.HoldMs, res.DecodeWorker, res.Error))
	case cluster.OutcomeRejected:
		if s.draining.Load() {
			return newAPIError(http.StatusServiceUnavailable, "", "the server is draining: "+res.Error)
		}
		if res.PrefillRejected || strings.Contains(res.Error, "busy") {
			return newAPIError(http.StatusTooManyRequests, "", "all workers busy: "+res.Error)
		}
		if strings.Contains(res.Error, "max_model_len") || strings.Contains(res.Error, "longer than") {
			return newAPIError(http.StatusBadRequest, "prompt", fmt.Sprintf("This model's maximum context length is %d tokens: %s", s.maxModelLen, res.Error))
		}
		return newAPIError(http.StatusServiceUnavailable, "", "request refused: "+res.Error)
	default:
		if s.draining.Load() {
			return newAPIError(http.StatusServiceUnavailable, "", "the server is shutting down: "+res.Error)
		}
		return newAPIError(http.StatusInternalServerError, "", "request failed: "+res.Error)
	}
}
