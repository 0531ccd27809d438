package serve

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// HeaderFail names a failure a request asks for (one of FailureTypes): the
// server answers it with that error at once, whatever the injection rate,
// so that a client's retry logic can be tested on demand.
const HeaderFail = "X-Mocker-Fail"

// injectedRetryAfterMs is the Retry-After-Ms an injected 429 or 5xx
// carries.
const injectedRetryAfterMs = "10"

// FailureTypes are the errors the server can inject, as load tools and
// gateways meet them from OpenAI-compatible servers, with their statuses.
var FailureTypes = []string{"rate_limit", "invalid_api_key", "context_length", "server_error", "invalid_request", "model_not_found"}

// injectedError is the error of failure type kind for model.
func injectedError(kind, model string) *apiError {
	switch kind {
	case "rate_limit":
		return newAPIError(http.StatusTooManyRequests, "", fmt.Sprintf("Rate limit reached for %s (injected failure)", model))
	case "invalid_api_key":
		e := newAPIError(http.StatusUnauthorized, "", "Incorrect API key provided. (injected failure)")
		e.Type = "AuthenticationError"
		return e
	case "context_length":
		return newAPIError(http.StatusBadRequest, "messages", fmt.Sprintf("This model's maximum context length was exceeded (injected failure, model %s)", model))
	case "server_error":
		return newAPIError(http.StatusInternalServerError, "", "Internal server error (injected failure)")
	case "invalid_request":
		return newAPIError(http.StatusBadRequest, "", "Invalid request (injected failure)")
	default: // model_not_found
		return newAPIError(http.StatusNotFound, "model", fmt.Sprintf("The model `%s` does not exist. (injected failure)", model))
	}
}

// injector decides which requests fail on purpose: a share of them at
// random (from the server's seed, so a run's sequence of failures repeats),
// or the one a request names in HeaderFail.
type injector struct {
	rate  float64 // fraction of requests, [0, 1]
	kinds []string
	mu    sync.Mutex
	rng   *rand.Rand
}

// ParseFailureTypes reads a comma-separated list of FailureTypes; empty
// means all of them.
func ParseFailureTypes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(FailureTypes, k) {
			return nil, fmt.Errorf("failure type %q: want one of %s", k, strings.Join(FailureTypes, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

func newInjector(percent float64, kinds []string, seed uint64) *injector {
	if len(kinds) == 0 {
		kinds = FailureTypes
	}
	return &injector{rate: percent / 100, kinds: kinds, rng: rand.New(rand.NewPCG(seed, 0x6d6f636b6572))}
}

// fail returns the error request r is to get instead of an answer, or nil.
// A HeaderFail naming no known type is itself a 400 naming the header.
func (in *injector) fail(r *http.Request, model string) *apiError {
	if kind := r.Header.Get(HeaderFail); kind != "" {
		if !slices.Contains(FailureTypes, kind) {
			return newAPIError(http.StatusBadRequest, HeaderFail, fmt.Sprintf("%s: %q is no failure type; want one of %s", HeaderFail, kind, strings.Join(FailureTypes, ", ")))
		}
		return injectedError(kind, model)
	}
	if in.rate <= 0 {
		return nil
	}
	in.mu.Lock()
	hit := in.rng.Float64() < in.rate
	kind := in.kinds[in.rng.IntN(len(in.kinds))]
	in.mu.Unlock()
	if !hit {
		return nil
	}
	return injectedError(kind, model)
}
