package harness

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file pin behaviour scripts copied from k6 rely on, each
// against what k6 documents or does.

func TestSummaryExport_GroupsAndChecksAreKeyedByName(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { check, group } from 'k6';
export const options = { iterations: 2 };
export default function () {
  group('outer', () => {
    group('inner', () => { check(1, { 'is one': (v) => v === 1 }); });
  });
  check(1, { 'top check': false });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	root, ok := res.summary["root_group"].(map[string]any)
	require.True(t, ok, "root_group: %v", res.summary["root_group"])

	groups, ok := root["groups"].(map[string]any)
	require.True(t, ok, "root_group.groups is an object keyed by group name, got %T", root["groups"])
	outer, ok := groups["outer"].(map[string]any)
	require.True(t, ok, "groups.outer: %v", groups)
	assert.Equal(t, "::outer", outer["path"])
	inner, ok := outer["groups"].(map[string]any)["inner"].(map[string]any)
	require.True(t, ok, "groups.outer.groups.inner: %v", outer["groups"])
	isOne, ok := inner["checks"].(map[string]any)["is one"].(map[string]any)
	require.True(t, ok, "groups.outer.groups.inner.checks[\"is one\"]: %v", inner["checks"])
	assert.Equal(t, 2.0, isOne["passes"])
	assert.Equal(t, 0.0, isOne["fails"])
	assert.Equal(t, "::outer::inner::is one", isOne["path"])
	assert.Equal(t, map[string]any{}, inner["groups"])

	top, ok := root["checks"].(map[string]any)["top check"].(map[string]any)
	require.True(t, ok, "root_group.checks is an object keyed by check name, got %v", root["checks"])
	assert.Equal(t, 2.0, top["fails"])
}

func TestRun_IterationThatAbortsIsCounted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src  string
		iterations float64
	}{
		{"abort in the first iteration", `
import exec from 'k6/execution';
export const options = { iterations: 5 };
export default function () { exec.test.abort('stop now'); }
`, 1},
		{"abort in the third iteration of one VU", `
import exec from 'k6/execution';
export const options = { iterations: 10 };
export default function () { if (exec.vu.iterationInScenario === 2) exec.test.abort('enough'); }
`, 3},
		{"abort from an async iteration", `
import exec from 'k6/execution';
export const options = { iterations: 5 };
export default async function () { await Promise.resolve(); exec.test.abort('async'); }
`, 1},
		{"abort inside a group", `
import exec from 'k6/execution';
import { group } from 'k6';
export const options = { iterations: 5 };
export default function () { group('g', () => exec.test.abort('in group')); }
`, 1},
		{"abort in a timer callback", `
import exec from 'k6/execution';
export const options = { iterations: 5 };
export default function () { setTimeout(() => exec.test.abort('in timer'), 1); }
`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, tc.src, nil)
			require.Error(t, res.err)
			assert.Equal(t, ExitScriptAborted, ExitCode(res.err))
			assert.Equal(t, tc.iterations, res.metric(t, "iterations", "count"), "k6 counts the iteration that called abort")
			assert.GreaterOrEqual(t, res.metric(t, "iteration_duration", "max"), 0.0, "and its duration")
		})
	}
}

func TestRun_ThresholdsOnEmptyMetricsAsK6(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, threshold string
		code            int
	}{
		{"empty Gauge is 0", `gg: ['value>3']`, ExitThresholdsFailed},
		{"empty Gauge equals 0", `gg: ['value==0']`, ExitOK},
		{"empty Trend p(95) is 0", `tr: ['p(95)>100']`, ExitThresholdsFailed},
		{"empty Trend avg is 0", `tr: ['avg<1', 'max==0', 'min==0', 'med==0']`, ExitOK},
		{"empty Counter count is 0", `cc: ['count>0']`, ExitThresholdsFailed},
		{"empty Counter rate is 0", `cc: ['rate==0']`, ExitOK},
		{"empty Rate is skipped", `rr: ['rate>0.9', 'rate<0.1']`, ExitOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { Counter, Gauge, Rate, Trend } from 'k6/metrics';
new Counter('cc'); new Gauge('gg'); new Rate('rr'); new Trend('tr');
export const options = { iterations: 1, thresholds: { `+tc.threshold+` } };
export default function () {}
`, nil)
			assert.Equal(t, tc.code, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
		})
	}
}

func TestRun_ThresholdsOnK6BuiltinHTTPMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, thresholds string
		code             int
	}{
		{"copied from an HTTP test", `
    http_req_duration: ['p(95)<500', 'p(99)<1500'],
    'http_req_duration{expected_response:true}': ['avg<300'],
    http_req_failed: ['rate<0.01'],
    http_reqs: ['count>=0'],
    http_req_waiting: ['med<200'], http_req_blocked: ['max<10'], http_req_connecting: ['max<10'],
    http_req_tls_handshaking: ['max<10'], http_req_sending: ['max<10'], http_req_receiving: ['max<10'],
    data_sent: ['count<1000'], data_received: ['rate<1000'],
    ws_sessions: ['count>=0'], ws_msgs_sent: ['count>=0'], ws_msgs_received: ['count>=0'],
    ws_ping: ['p(95)<100'], ws_session_duration: ['max<100'], ws_connecting: ['max<100'],
    grpc_req_duration: ['p(95)<100'],`, ExitOK},
		{"an empty http_reqs has count 0", `http_reqs: ['count>0']`, ExitThresholdsFailed},
		{"http_reqs is a Counter", `http_reqs: ['value>0']`, ExitInvalidConfig},
		{"http_req_failed is a Rate", `http_req_failed: ['count>0']`, ExitInvalidConfig},
		{"data_received is a Counter", `data_received: ['avg>0']`, ExitInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
export const options = { iterations: 1, thresholds: {`+tc.thresholds+` } };
export default function () {}
`, nil)
			assert.Equal(t, tc.code, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
		})
	}
}

func TestRun_MetricNamesFollowK6Rule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, metric string
		code         int
	}{
		{"one character", "x", ExitScriptException},
		{"two characters", "xy", ExitOK},
		{"leading underscore", "_x", ExitOK},
		{"129 characters", strings.Repeat("m", 129), ExitOK},
		{"130 characters", strings.Repeat("m", 130), ExitScriptException},
		{"leading digit", "1x", ExitScriptException},
		{"dash", "a-b", ExitScriptException},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { Counter } from 'k6/metrics';
const c = new Counter('`+tc.metric+`');
export const options = { iterations: 1 };
export default function () { c.add(1); }
`, nil)
			assert.Equal(t, tc.code, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
			if tc.code == ExitScriptException {
				assert.Contains(t, res.err.Error(), "invalid metric name")
			}
		})
	}
}

func TestRun_NoColorIsTheFlagNotTheTerminal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		noColor   bool
		stdoutTTY bool
		want      string
	}{
		{"piped stdout, no flag", false, false, "noColor=false isStdOutTTY=false\n"},
		{"piped stdout, --no-color", true, false, "noColor=true isStdOutTTY=false\n"},
		{"terminal, no flag", false, true, "noColor=false isStdOutTTY=true\n"},
		{"terminal, --no-color", true, true, "noColor=true isStdOutTTY=true\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runFile(t, filepath.Join("testdata", "no_color.js"), func(c *Config) { c.NoColor, c.StdoutTTY = tc.noColor, tc.stdoutTTY })
			require.NoError(t, res.err, res.stderr)
			assert.Equal(t, tc.want, res.stdout)
		})
	}
}

func TestRun_TextSummaryOnAPipeIsPlainWithoutTheFlag(t *testing.T) {
	t.Parallel()
	src := "export const options = { iterations: 1 };\nexport default function () {}\n"
	plain := runScript(t, src, func(c *Config) { c.NoColor = false })
	require.NoError(t, plain.err)
	assert.Contains(t, plain.stdout, "iterations")
	assert.NotContains(t, plain.stdout, "\x1b[")
	colored := runScript(t, src, func(c *Config) { c.NoColor, c.StdoutTTY = false, true })
	require.NoError(t, colored.err)
	assert.Contains(t, colored.stdout, "\x1b[", "a terminal gets colours")
}

func TestCLI_NoColorInSummaryDataFollowsTheFlag(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, nil, "run", "-q", "no_color.js")
	require.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, "noColor=false isStdOutTTY=false\n", stdout)
	code, stdout, stderr = runBinary(t, nil, "run", "-q", "--no-color", "no_color.js")
	require.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, "noColor=true isStdOutTTY=false\n", stdout)
}

func TestRun_NonFiniteOptionsAreConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, options, field string }{
		{"vus NaN", `vus: NaN, iterations: 2`, "options.vus: must be a finite number, got NaN"},
		{"iterations NaN", `iterations: NaN`, "options.iterations: must be a finite number, got NaN"},
		{"duration Infinity", `vus: 1, duration: Infinity`, "options.duration: must be a finite number, got Infinity"},
		{"stage target", `stages: [{ duration: '1s', target: -Infinity }]`, "options.stages[0].target: must be a finite number, got -Infinity"},
		{"scenario rate", `scenarios: { s: { executor: 'constant-arrival-rate', rate: NaN, duration: '1s', preAllocatedVUs: 1 } }`,
			"options.scenarios.s.rate: must be a finite number, got NaN"},
		{"scenario vus from a failed parse", `scenarios: { s: { executor: 'per-vu-iterations', vus: parseInt('x') } }`,
			"options.scenarios.s.vus: must be a finite number, got NaN"},
		{"huge duration in ms", `scenarios: { s: { executor: 'constant-vus', duration: 1e300 } }`,
			"scenarios.s.duration: duration 1e+300 ms is out of range"},
		{"setupTimeout", `setupTimeout: Infinity`, "options.setupTimeout: must be a finite number, got Infinity"},
		{"a getter that throws", `get vus() { throw new Error('getter boom'); }`, "getter boom"},
		{"threshold delay", `thresholds: { iterations: [{ threshold: 'count>0', delayAbortEval: NaN }] }`,
			"options.thresholds.iterations[0].delayAbortEval: must be a finite number, got NaN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, "export const options = { "+tc.options+" };\nexport default function () {}\n", nil)
			require.Error(t, res.err)
			assert.Equal(t, ExitInvalidConfig, ExitCode(res.err), res.stderr)
			assert.Contains(t, res.err.Error(), tc.field)
		})
	}
}

func TestCLI_SignalDuringSetupSkipsTeardownAndWritesTheSummary(t *testing.T) {
	t.Parallel()
	r := startBinary(t, "run", "-q", "signal_setup.js")
	r.waitFor(t, "SETUP RUNNING")
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGINT))
	code := r.wait(t)
	stderr := r.stderr.String()
	assert.Equal(t, ExitExternalAbort, code, stderr)
	assert.Contains(t, stderr, "setup did not finish, so teardown is skipped (as in k6); the summary still runs")
	assert.NotContains(t, stderr, "teardown and the summary still run", "the message says what happens")
	assert.NotContains(t, stderr, "SETUP ENDED")
	assert.NotContains(t, stderr, "ITERATION RAN")
	assert.NotContains(t, stderr, "TEARDOWN RAN", "k6 runs no teardown after a setup that did not finish")
	assert.Contains(t, r.stdout.String(), "█ METRICS", "the summary is written")
}

func TestRun_SetupDataTravelsAsK6Sends(t *testing.T) {
	t.Parallel()
	when := time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)
	whenJSON, err := json.Marshal(when.In(time.Local))
	require.NoError(t, err)
	tests := []struct {
		name, setup, want string
		code              int
	}{
		{"undefined property arrives as null with its key", `return { a: undefined, b: 1 };`, `{"a":null,"b":1}`, ExitOK},
		{"Date arrives as its JSON string", `return { when: new Date(Date.UTC(2024, 0, 2)) };`, `{"when":` + string(whenJSON) + `}`, ExitOK},
		{"nested arrays and nulls", `return [1, [null, 'x'], { y: [] }];`, `[1,[null,"x"],{"y":[]}]`, ExitOK},
		{"null", `return null;`, `null`, ExitOK},
		{"undefined stays undefined", `return undefined;`, `undefined`, ExitOK},
		{"NaN is an error", `return { v: NaN };`, "", ExitScriptException},
		{"Infinity is an error", `return { v: [Infinity] };`, "", ExitScriptException},
		{"a function is an error", `return { f: function () {} };`, "", ExitScriptException},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
export const options = { iterations: 1 };
export function setup() { `+tc.setup+` }
export default function (data) { console.log('DATA=' + (data === undefined ? 'undefined' : JSON.stringify(data))); }
`, nil)
			require.Equal(t, tc.code, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
			if tc.code != ExitOK {
				assert.Contains(t, res.err.Error(), "cannot be passed to the VUs as JSON")
				return
			}
			assert.Contains(t, res.stderr, "DATA="+tc.want+"  source=console")
		})
	}
}

// ioModule is a plugin whose io() does "I/O": refused in the init context.
func ioModule(vu VU) ModuleInstance {
	return ExportsFunc(func() Exports {
		return Exports{Named: map[string]any{
			"io": func() string {
				if err := NotInInit(vu, "io.io"); err != nil {
					panic(vu.Runtime().NewGoError(err))
				}
				return "done"
			},
		}}
	})
}

func init() { Register("k6/x/iotest", ModuleFunc(ioModule)) }

func TestNotInInit_RefusesIOInTheInitContextOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, init, body string
		code             int
	}{
		{"top-level call", `io();`, ``, ExitScriptException},
		{"call from a function run in init", `const f = () => io(); f();`, ``, ExitScriptException},
		{"setup, default and teardown", ``, `export function setup() { io(); } export function teardown() { io(); }`, ExitOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { io } from 'k6/x/iotest';
`+tc.init+`
export const options = { iterations: 1 };
export default function () { io(); }
`+tc.body, nil)
			require.Equal(t, tc.code, ExitCode(res.err), "%v\n%s", res.err, res.stderr)
			if tc.code != ExitOK {
				assert.Contains(t, res.err.Error(), "io.io: not allowed in the init context")
				assert.ErrorContains(t, res.err, "init")
			}
		})
	}
}
