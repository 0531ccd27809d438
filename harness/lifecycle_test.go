package harness

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withFastThresholds evaluates thresholds every few milliseconds during
// the test; callers must not be parallel (the interval is process-wide).
func withFastThresholds(t *testing.T) {
	old := thresholdInterval
	thresholdInterval = 20 * time.Millisecond
	t.Cleanup(func() { thresholdInterval = old })
}

func TestRun_AbortOnFailStillRunsTeardown(t *testing.T) {
	withFastThresholds(t)
	res := runScript(t, `
import { sleep } from 'k6';
export const options = {
  scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '1m' } },
  thresholds: { iterations: [{ threshold: 'count<3', abortOnFail: true }] },
};
export default function () { sleep(0.01); }
export function teardown() { console.log('TEARDOWN RAN'); }
`, nil)
	require.Error(t, res.err)
	assert.Equal(t, ExitThresholdsFailed, ExitCode(res.err))
	assert.Contains(t, res.stderr, "TEARDOWN RAN")
}

func TestRun_AbortOnFailIgnoresMetricsWithoutSamplesUntilTheEnd(t *testing.T) {
	withFastThresholds(t)
	tests := []struct {
		name, addFrom string
		crossed       string
	}{
		// The counter gets its first sample after several evaluations. At
		// the end, as in k6, the empty Trend and Gauge count as 0 (so avg>5
		// and value>5 fail) and the empty Rate is skipped.
		{"late first sample passes", "3", "never_gauge, never_trend"},
		// never a sample: at the end an empty Counter counts 0, so count>0 fails
		{"no sample at all fails at the end", "1e9", "never_gauge, never_trend, orders"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runScript(t, `
import { sleep } from 'k6';
import { Counter, Rate, Trend, Gauge } from 'k6/metrics';
const orders = new Counter('orders');
new Rate('never_rate'); new Trend('never_trend'); new Gauge('never_gauge');
export const options = {
  scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '400ms' } },
  thresholds: {
    orders: [{ threshold: 'count>0', abortOnFail: true }],
    never_rate: [{ threshold: 'rate>0.5', abortOnFail: true }],
    never_trend: [{ threshold: 'avg>5', abortOnFail: true }],
    never_gauge: [{ threshold: 'value>5', abortOnFail: true }],
  },
};
export default function () { sleep(0.03); if (__ITER >= `+tc.addFrom+`) orders.add(1); }
`, nil)
			require.Error(t, res.err)
			assert.Equal(t, ExitThresholdsFailed, ExitCode(res.err), res.stderr)
			assert.Contains(t, res.err.Error(), "'"+tc.crossed+"' have been crossed")
			assert.NotContains(t, res.err.Error(), "abortOnFail", "the run was not aborted")
		})
	}
}

func TestRun_VUsGaugeIsSampledOnlyWhileScenariosRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		options string
		want    float64
	}{
		{"constant-vus", `{ vus: 5, duration: '1200ms', thresholds: { vus: ['value>=5'], vus_max: ['value==5'] } }`, 5},
		{"iterations faster than a tick", `{ vus: 3, iterations: 3, thresholds: { vus: ['value==3'] } }`, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { sleep } from 'k6';
export const options = `+tc.options+`;
export default function () { if (__ENV.SLEEP) sleep(0.1); }
`, func(c *Config) { c.Env = map[string]string{"SLEEP": "1"} })
			require.NoError(t, res.err, res.stderr)
			assert.Equal(t, tc.want, res.metric(t, "vus", "value"))
			assert.Equal(t, tc.want, res.metric(t, "vus", "min"), "no sample before the VUs start or after they stop")
			assert.Equal(t, tc.want, res.metric(t, "vus", "max"))
		})
	}
}

func TestRun_HandleSummaryWritesEveryKeyItCan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.txt")
	bad := filepath.Join(dir, "missing-dir", "bad.json")
	for _, tc := range []struct {
		name, thresholds string
		code             int
	}{
		{"passing test", "[]", ExitOK},
		{"thresholds crossed keep their exit code", "['count>10']", ExitThresholdsFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runScript(t, `
export const options = { iterations: 1, thresholds: { iterations: `+tc.thresholds+` } };
export default function () {}
export function handleSummary() {
  return { stdout: 'OUT\n', stderr: 'ERR\n', [__ENV.BAD]: 'x', [__ENV.GOOD]: 'written' };
}
`, func(c *Config) { c.Env = map[string]string{"GOOD": good, "BAD": bad}; c.SummaryExport = "" })
			assert.Equal(t, tc.code, ExitCode(res.err), res.stderr)
			assert.Equal(t, "OUT\n", res.stdout, "no fallback to the default summary")
			assert.Contains(t, res.stderr, "ERR\n")
			assert.Contains(t, res.stderr, "could not save some summary information: "+bad+": ")
			b, err := os.ReadFile(good)
			require.NoError(t, err)
			assert.Equal(t, "written", string(b))
			require.NoError(t, os.Remove(good))
		})
	}
}

func TestRun_JSONOutputIsFlushedWhileTheTestRuns(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "live.json")
	dir := t.TempDir()
	script := filepath.Join(dir, "s.js")
	require.NoError(t, writeFile(script, `
import { sleep } from 'k6';
export const options = { vus: 1, duration: '2500ms' };
export default function () { sleep(0.1); }
`))
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{Script: script, Quiet: true, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Outputs: []string{"json=" + out}})
	}()
	sawData := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			break wait
		case <-tick.C:
			if st, err := os.Stat(out); err == nil && st.Size() > 0 {
				sawData = true
			}
		}
	}
	assert.True(t, sawData, "samples reached the file before the run ended")
}

func TestRun_MetricAddConvertsValuesLikeJS(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { Trend } from 'k6/metrics';
const t = new Trend('t_conv');
export const options = { iterations: 1, summaryTrendStats: ['count', 'min', 'max'] };
export default function () {
  t.add('5'); t.add(true); t.add(' 2.5 ');
  t.add('abc'); t.add(null); t.add(undefined); t.add({});
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 3.0, res.metric(t, "t_conv", "count"), "numeric strings and booleans count")
	assert.Equal(t, 1.0, res.metric(t, "t_conv", "min"))
	assert.Equal(t, 5.0, res.metric(t, "t_conv", "max"))
	assert.Contains(t, res.stderr, "t_conv.add(abc): value is not a number")
	assert.Contains(t, res.stderr, "t_conv.add(null): no value was given")
}

func TestRun_GroupDurationIsEmittedWhenTheGroupThrows(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { group } from 'k6';
export const options = { iterations: 2, summaryTrendStats: ['count'], thresholds: { 'group_duration{group:::boom}': [] } };
export default function () { group('boom', () => { throw new Error('inside group'); }); }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 2.0, res.metric(t, "group_duration{group:::boom}", "count"))
	assert.Contains(t, res.stderr, "inside group", "the exception still ends the iteration")
}

func TestRun_TestRunDurationIncludesSetupAndTeardown(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { sleep } from 'k6';
let teardownEnd = 0;
export const options = { iterations: 1 };
export function setup() { const t0 = Date.now(); sleep(0.1); return { t0 }; }
export default function () {}
export function teardown() { sleep(0.1); teardownEnd = Date.now(); }
export function handleSummary(data) {
  const span = teardownEnd - data.setup_data.t0; // Date.now() has whole milliseconds
  return { stdout: data.state.testRunDurationMs >= span - 1 ? 'covers setup and teardown' : 'too short: ' + data.state.testRunDurationMs + ' < ' + span };
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, "covers setup and teardown", res.stdout)
}

func TestRun_ExecTestOptionsAreTheConsolidatedOptions(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import exec from 'k6/execution';
export const options = { vus: 2, iterations: 4, tags: { team: 'a' } };
export default function () {}
export function teardown() {
  const o = exec.test.options;
  const d = o.scenarios.default;
  console.log('OPTS ' + [d.executor, d.vus, d.iterations, d.maxDuration, d.gracefulStop, o.tags.team, o.summaryTrendStats.length].join(' '));
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "OPTS shared-iterations 2 4 10m0s 30s a 6")
}

func TestRun_UnknownOptionKeysAreWarnedAbout(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 1, threshold: { checks: ['rate>1'] }, discardResponseBodies: true };
export default function () {}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "options.threshold is not a k6 option")
	assert.NotContains(t, res.stderr, "discardResponseBodies", "k6 options the harness does not use are not typos")
}
