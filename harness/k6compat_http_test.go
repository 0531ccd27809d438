package harness

import (
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestK6Compat_HTTPCorpus runs the k6/http scripts of testdata/k6compat
// against a local test server (its URL in __ENV.BASE_URL; the same
// server over TLS, with a self-signed certificate, in __ENV.TLS_URL), on the wall
// clock, and compares each outcome with what k6's documentation gives:
// the exit code, the checks that pass (none may fail) and key values of
// the --summary-export, read as in TestK6Compat_Corpus.
func TestK6Compat_HTTPCorpus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		script  string
		code    int
		checks  float64 // checks that pass; none may fail
		values  map[string]float64
		present []string // summary paths that must exist
		errHas  string
	}{
		{script: "http_get_status.js", checks: 7, values: map[string]float64{"metrics/http_reqs/count": 1, "metrics/http_req_failed/value": 0},
			present: []string{"metrics/http_req_duration{expected_response:true}/avg"}},
		{script: "http_status_codes.js", checks: 2, values: map[string]float64{
			"metrics/http_reqs/count": 3, "metrics/http_req_failed/passes": 2, "metrics/http_req_failed/fails": 1,
			"metrics/http_reqs{status:404}/count": 1,
		}},
		{script: "http_post_form.js", checks: 3},
		{script: "http_post_json_string.js", checks: 4},
		{script: "http_post_arraybuffer.js", checks: 1},
		{script: "http_verbs.js", checks: 6, values: map[string]float64{"metrics/http_reqs/count": 6}},
		{script: "http_redirects_follow.js", checks: 2, values: map[string]float64{"metrics/http_reqs/count": 4}},
		{script: "http_redirects_zero.js", checks: 2, values: map[string]float64{"metrics/http_reqs/count": 1}},
		{script: "http_redirects_max.js", checks: 1, values: map[string]float64{"metrics/http_reqs/count": 2}},
		{script: "http_redirect_307.js", checks: 1, values: map[string]float64{"metrics/http_reqs/count": 2}},
		{script: "http_timeout.js", checks: 4, values: map[string]float64{"metrics/http_req_failed/passes": 1}},
		{script: "http_refused.js", checks: 3, values: map[string]float64{"metrics/http_req_failed/passes": 1, "metrics/http_reqs/count": 1}},
		{script: "http_dns_failure.js", checks: 2, values: map[string]float64{"metrics/http_req_failed/passes": 1}},
		{script: "http_throw_option.js", checks: 1},
		{script: "http_cookies_jar.js", checks: 3},
		{script: "http_cookies_reset.js", checks: 2},
		{script: "http_cookie_jar_api.js", checks: 3},
		{script: "http_batch_array.js", checks: 2, values: map[string]float64{"metrics/http_reqs/count": 3}},
		{script: "http_batch_object.js", checks: 2, values: map[string]float64{"metrics/http_reqs/count": 3}},
		{script: "http_async_request.js", checks: 4, values: map[string]float64{"metrics/http_reqs/count": 6, "metrics/iterations/count": 2}},
		{script: "http_expected_statuses.js", values: map[string]float64{
			"metrics/http_req_failed/passes": 2, "metrics/http_req_failed/fails": 2, "metrics/http_reqs/count": 4,
		}},
		{script: "http_response_callback_null.js", values: map[string]float64{
			"metrics/http_req_failed/passes": 1, "metrics/http_req_failed/fails": 0, "metrics/http_reqs/count": 2,
		}},
		{script: "http_json_selector.js", checks: 4},
		{script: "http_response_type.js", checks: 3},
		{script: "http_discard_response_bodies.js", checks: 2},
		{script: "http_tags_name.js", values: map[string]float64{"metrics/http_reqs{name:status-page}/count": 3}},
		{script: "http_url_template.js", checks: 2},
		{script: "http_system_tags.js", values: map[string]float64{"metrics/http_reqs{status:200}/count": 1}},
		{script: "http_basic_auth.js", checks: 2},
		{script: "http_digest_auth.js", checks: 1, values: map[string]float64{
			"metrics/http_reqs/count": 2, "metrics/http_req_failed/value": 0,
			"metrics/http_reqs{status:401}/count": 1, "metrics/http_reqs{status:200}/count": 1,
		}},
		{script: "http_user_agent.js", checks: 2},
		{script: "http_request_headers_copy.js", checks: 2},
		{script: "http_hosts.js", checks: 1},
		{script: "http_compression.js", checks: 4},
		{script: "http_compression_codings.js", checks: 8},
		{script: "http_file_multipart.js", checks: 3},
		{script: "http_data_metrics.js"},
		{script: "http_init_context.js", code: ExitScriptException, errHas: "init context"},
		{script: "http_no_connection_reuse.js", checks: 1},
		{script: "http_tls_insecure.js", checks: 3},
		{script: "http_batch_per_host.js", checks: 2},
		{script: "http_no_vu_connection_reuse.js", checks: 4},
		{script: "http_connection_reuse_across_iterations.js", checks: 1},
		{script: "http_tls_unknown_authority.js", checks: 2},
	}
	srv := newTestHTTPServer(t)
	tlsSrv := httptest.NewUnstartedServer(srv.Config.Handler)
	// the unknown-authority case fails a handshake on purpose
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.script, ".js"), func(t *testing.T) {
			t.Parallel()
			res := runFile(t, filepath.Join("testdata", "k6compat", tc.script), func(c *Config) {
				c.Env = map[string]string{"BASE_URL": srv.URL, "TLS_URL": tlsSrv.URL}
			})
			require.Equal(t, tc.code, ExitCode(res.err), "%v\nstderr:\n%s", res.err, res.stderr)
			if tc.errHas != "" {
				require.Error(t, res.err)
				assert.Contains(t, res.err.Error(), tc.errHas)
				return
			}
			if tc.checks > 0 {
				passes, _ := exportValue(res.summary, "metrics/checks/passes")
				fails, _ := exportValue(res.summary, "metrics/checks/fails")
				assert.Equal(t, tc.checks, passes, "checks passed; stderr:\n%s", res.stderr)
				assert.Zero(t, fails, "checks failed; stderr:\n%s", res.stderr)
			}
			for _, path := range tc.present {
				_, ok := exportValue(res.summary, path)
				assert.True(t, ok, "the summary export has no %s", path)
			}
			for path, want := range tc.values {
				got, ok := exportValue(res.summary, path)
				if assert.True(t, ok, "the summary export has no %s; stderr:\n%s", path, res.stderr) {
					assert.InDelta(t, want, got, 1e-9, path)
				}
			}
		})
	}
}
