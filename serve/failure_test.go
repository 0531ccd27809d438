package serve

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// TestFailureInjection_HeaderForcesEachType: a request naming a failure
// type in X-Mocker-Fail gets that error, with OpenAI's error JSON and the
// status a client branches on, and never reaches the cluster; an unknown
// type is a 400 naming the header.
func TestFailureInjection_HeaderForcesEachType(t *testing.T) {
	t.Parallel()
	srv, ts := startServer(t, cluster.Config{Args: fast}, Options{})
	want := map[string]int{"rate_limit": 429, "invalid_api_key": 401, "context_length": 400, "server_error": 500, "invalid_request": 400, "model_not_found": 404}
	require.Len(t, want, len(FailureTypes))
	for kind, status := range want {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"model":"mocker","prompt":"hello there","max_tokens":4}`))
		require.NoError(t, err)
		req.Header.Set(HeaderFail, kind)
		resp, err := ts.Client().Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, kind)
		assert.Contains(t, string(body), fmt.Sprintf(`"code":%d`, status), kind)
		assert.Contains(t, string(body), "injected failure", kind)
	}
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"model":"mocker","prompt":"x"}`))
	require.NoError(t, err)
	req.Header.Set(HeaderFail, "meteor_strike")
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), HeaderFail)
	assert.Zero(t, srv.Cluster().Stats().Requests, "no injected failure reached the cluster")
}

// TestFailureInjection_RateFailsItsShareAndTheSDKRetries: at a 50% rate of
// rate_limit errors, the OpenAI SDK's own retries get every request through
// and the server counts the failures it injected; the same seed injects
// the same sequence.
func TestFailureInjection_RateFailsItsShareAndTheSDKRetries(t *testing.T) {
	t.Parallel()
	run := func() (injected float64) {
		srv, ts := startServer(t, cluster.Config{Args: fast}, Options{FailureInjectionRate: 50, FailureTypes: []string{"rate_limit"}, Seed: 7})
		c := sdk(ts.URL, client(ts))
		for range 20 {
			resp, err := c.Completions.New(t.Context(), openai.CompletionNewParams{
				Model:     "mocker",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("retry me")},
				MaxTokens: openai.Int(2),
			}, option.WithMaxRetries(10))
			require.NoError(t, err)
			assert.Equal(t, int64(2), resp.Usage.CompletionTokens)
		}
		n := sum(scrape(t, ts.Client(), ts.URL)["mocker_injected_failures_total"], nil)
		assert.Equal(t, uint64(20), srv.Cluster().Stats().Requests, "only the requests let through reached the cluster")
		return n
	}
	first := run()
	assert.Greater(t, first, 5.0, "about half of the tries failed")
	assert.Equal(t, first, run(), "the seed decides which tries fail")
}

func TestFailureInjection_BadOptionsAreRefused(t *testing.T) {
	t.Parallel()
	_, err := New(cluster.Config{}, Options{FailureInjectionRate: 101})
	assert.ErrorContains(t, err, "failure_injection_rate")
	_, err = New(cluster.Config{}, Options{FailureTypes: []string{"nope"}})
	assert.ErrorContains(t, err, `failure_types: "nope"`)
	_, err = ParseFailureTypes("rate_limit, server_error")
	assert.NoError(t, err)
	_, err = ParseFailureTypes("rate_limit,oops")
	assert.ErrorContains(t, err, `"oops"`)
}
