package harness

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHTTP_RefusedAtInitOnTheVirtualClock(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import http from 'k6/http';
export default function () { http.get('http://127.0.0.1:1/'); }
`, func(c *Config) { c.Clock = ClockVirtual })
	require.Equal(t, ExitInvalidConfig, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
	assert.Contains(t, res.err.Error(), `"k6/http"`)
	assert.Contains(t, res.err.Error(), "virtual clock")
}

func TestHTTP_AllowedOnThePacedAndWallClocks(t *testing.T) {
	t.Parallel()
	for _, clock := range []ClockMode{ClockWall, ClockPaced} {
		res := runHTTPScript(t, `
import http from 'k6/http';
export default function () { http.get(__ENV.BASE_URL + '/status/200'); }
`, func(c *Config) { c.Clock = clock })
		require.NoError(t, res.err, res.stderr)
		assert.Equal(t, 1.0, res.metric(t, "http_reqs", "count"))
	}
}

// TestHTTP_SamplesCarryK6Tags reads the NDJSON output: a request's
// samples carry k6's system tags, the scenario's and group's, and the
// params' tags; data_sent carries no request tags.
func TestHTTP_SamplesCarryK6Tags(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out.json")
	res := runHTTPScript(t, `
import http from 'k6/http';
import { group } from 'k6';
export const options = { scenarios: { api: { executor: 'shared-iterations', iterations: 1 } } };
export default function () {
  group('calls', () => { http.get(__ENV.BASE_URL + '/status/404', { tags: { team: 'core' } }); });
}
`, func(c *Config) { c.Outputs = []string{"json=" + out} })
	require.NoError(t, res.err, res.stderr)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Type, Metric string
			Data         struct{ Tags map[string]string }
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		if line.Type == "Point" {
			seen[line.Metric] = line.Data.Tags
		}
	}
	reqTags := seen["http_reqs"]
	require.NotNil(t, reqTags, "no http_reqs sample")
	for k, want := range map[string]string{
		"method": "GET", "status": "404", "error_code": "1404", "expected_response": "false",
		"group": "::calls", "scenario": "api", "proto": "HTTP/1.1", "team": "core",
	} {
		assert.Equal(t, want, reqTags[k], "tag %s", k)
	}
	assert.Equal(t, reqTags["url"], reqTags["name"], "the name tag defaults to the URL")
	for _, m := range []string{"http_req_duration", "http_req_blocked", "http_req_connecting", "http_req_tls_handshaking",
		"http_req_sending", "http_req_waiting", "http_req_receiving", "http_req_failed"} {
		assert.Equal(t, reqTags, seen[m], "%s carries the request's tags", m)
	}
	assert.NotContains(t, seen["data_sent"], "status")
	assert.Equal(t, "api", seen["data_sent"]["scenario"])
}

// TestHTTP_ResponseBehavesAsAPlainObject: the Response, whose fields are
// made on first read, still lists, serialises, keeps assignments and
// returns the same nested objects on each read.
func TestHTTP_ResponseBehavesAsAPlainObject(t *testing.T) {
	t.Parallel()
	res := runHTTPScript(t, `
import http from 'k6/http';
import { check } from 'k6';
export const options = { thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(__ENV.BASE_URL + '/json');
  check(r, {
    'keys': (r) => Object.keys(r).includes('timings') && Object.keys(r).includes('status'),
    'stringify': (r) => JSON.parse(JSON.stringify(r)).status === 200,
    'in': (r) => 'body' in r && !('nope' in r),
    'identity': (r) => r.headers === r.headers && r.timings === r.timings,
    'assign': (r) => { r.extra = 5; r.status = 7; return r.extra === 5 && r.status === 7; },
    'delete': (r) => { delete r.proto; return r.proto === undefined; },
    'spread': (r) => ({ ...r }).url === __ENV.BASE_URL + '/json',
  });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 7.0, res.metric(t, "checks", "passes"))
}

// TestHTTP_StopCutsARequestShort: at the end of gracefulStop a request in
// flight is cancelled; it records no sample and is no script error.
func TestHTTP_StopCutsARequestShort(t *testing.T) {
	t.Parallel()
	res := runHTTPScript(t, `
import http from 'k6/http';
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '200ms', gracefulStop: '0s' } } };
export default function () { http.get(__ENV.BASE_URL + '/slow'); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Zero(t, res.metricOrZero(t, "http_reqs", "count"))
	assert.Zero(t, res.metricOrZero(t, "iterations", "count"))
	assert.NotContains(t, res.stderr, "context canceled")
	assert.NotContains(t, res.stderr, "request failed")
}

// TestHTTP_SocketWaitIsScriptTimeOnThePacedClock: on the paced clock a
// request's wait passes on the run's clock (Date.now() and the test's
// duration move by at least the server's delay), and VUs waiting on
// sockets do not hold each other up.
func TestHTTP_SocketWaitIsScriptTimeOnThePacedClock(t *testing.T) {
	t.Parallel()
	res := runHTTPScript(t, `
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 3, iterations: 2 } }, thresholds: { checks: ['rate==1'] } };
export default function () {
  const t0 = Date.now();
  const d0 = exec.instance.currentTestRunDuration;
  const r = http.get(__ENV.BASE_URL + '/delay/150');
  check(r, {
    'answered': (r) => r.body === 'waited',
    'Date.now moved': () => Date.now() - t0 >= 150,
    'test duration moved': () => exec.instance.currentTestRunDuration - d0 >= 150,
  });
}
`, func(c *Config) { c.Clock = ClockPaced })
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 18.0, res.metric(t, "checks", "passes"))
}
