package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/sobek"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness/metrics"
)

func TestRun_ESModulesAndOpen(t *testing.T) {
	t.Parallel()
	res := runFile(t, filepath.Join("testdata", "esm.js"), nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 5.0, res.metric(t, "checks", "passes"))
	assert.Equal(t, 0.0, res.metric(t, "checks", "fails"))
}

func TestRun_OpenOutsideInitThrows(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 1 };
export default function () { open('./script.js'); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "only available in the init context")
}

func TestRun_UnknownImportIsAScriptError(t *testing.T) {
	t.Parallel()
	res := runScript(t, `import x from 'k6/x/nothing'; export default function () {}`, nil)
	require.Error(t, res.err)
	assert.Equal(t, ExitScriptException, ExitCode(res.err))
	assert.Contains(t, res.err.Error(), `unknown module "k6/x/nothing"`)
}

func TestRun_SetupDataIsJSONRoundTripped(t *testing.T) {
	t.Parallel()
	res := runFile(t, filepath.Join("testdata", "setup_data.js"), nil)
	require.NoError(t, res.err, res.stderr)
	// 4 iterations × 2 checks + 1 in teardown, all passing
	assert.Equal(t, 9.0, res.metric(t, "checks", "passes"))
	assert.Equal(t, 0.0, res.metric(t, "checks", "fails"))
}

func TestRun_NoSetupSkipsSetup(t *testing.T) {
	t.Parallel()
	res := runFile(t, filepath.Join("testdata", "setup_data.js"), func(c *Config) { c.Overrides.NoSetup, c.Overrides.NoTeardown = true, true })
	require.NoError(t, res.err)
	// data is undefined, so each check function throws before any sample
	assert.Contains(t, res.stderr, "TypeError")
	assert.Equal(t, 0.0, res.metricOrZero(t, "checks", "passes"), "no check ran, so checks may have no sample")
	assert.Equal(t, 4.0, res.metric(t, "iterations", "count"))
}

func TestRun_TagFilteredThresholds(t *testing.T) {
	t.Parallel()
	src := `
import { Counter } from 'k6/metrics';
const hits = new Counter('hits');
export const options = {
  tags: { suite: 'tags' },
  scenarios: {
    a: { executor: 'per-vu-iterations', iterations: 3, tags: { kind: 'alpha' } },
    b: { executor: 'per-vu-iterations', iterations: 2, exec: 'other' },
  },
  thresholds: {
    'iterations{scenario:a}': ['count==3'],
    'iterations{scenario:b}': ['count==2'],
    'hits{kind:alpha,suite:tags}': ['count==3'],
    'hits{color:red}': ['count==%d'],
  },
};
export default function () { hits.add(1); }
export function other() { hits.add(1, { color: 'red' }); }
`
	res := runScript(t, fmt.Sprintf(src, 2), nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 3.0, res.metric(t, "iterations{scenario:a}", "count"))
	assert.Equal(t, 2.0, res.metric(t, "hits{color:red}", "count"))

	res = runScript(t, fmt.Sprintf(src, 5), nil)
	require.Error(t, res.err)
	assert.Equal(t, ExitThresholdsFailed, ExitCode(res.err))
	assert.Contains(t, res.err.Error(), "hits{color:red}")
	assert.NotContains(t, res.err.Error(), "scenario:a")
}

func TestRun_AbortOnFailStopsTheTest(t *testing.T) {
	old := thresholdInterval
	thresholdInterval = 20 * time.Millisecond
	defer func() { thresholdInterval = old }()
	res := runScript(t, `
import { sleep } from 'k6';
export const options = {
  scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '1m' } },
  thresholds: { iterations: [{ threshold: 'count<3', abortOnFail: true }] },
};
export default function () { sleep(0.01); }
`, nil)
	require.Error(t, res.err)
	assert.Equal(t, ExitThresholdsFailed, ExitCode(res.err))
	assert.Contains(t, res.err.Error(), "abortOnFail")
	assert.Less(t, res.metric(t, "iterations", "count"), 1000.0)
}

func TestRun_GroupsAndChecksTags(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { check, group } from 'k6';
export const options = {
  iterations: 2,
  summaryTrendStats: ['count', 'avg'],
  thresholds: {
    'checks{group:::outer::inner}': ['rate==1'],
    'group_duration{group:::outer}': [],
    'checks{check:bad}': ['rate==0'],
  },
};
export default function () {
  group('outer', () => {
    group('inner', () => { check(1, { good: (v) => v === 1 }); });
  });
  check(1, { bad: false });
}
export function handleSummary(data) {
  const outer = data.root_group.groups[0];
  return { stdout: outer.name + '/' + outer.groups[0].name + ':' + outer.groups[0].checks[0].passes + ':' + data.root_group.checks[0].fails +
    ':' + data.metrics['group_duration{group:::outer}'].values.count };
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, "outer/inner:2:2:2", res.stdout)
}

// A condition that calls check itself, natively too, leaves the outer
// check's value as it was for the conditions after it.
func TestRun_NestedChecksSeeTheirOwnValues(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { check } from 'k6';
export const options = { iterations: 2 };
export default function () {
  check('outer', {
    first: (v) => v === 'outer' && check('inner', { nested: (w) => w === 'inner' }),
    native: check.bind(null, 'bound', { bound: (w) => w === 'bound' }),
    last: (v) => v === 'outer',
  });
}
export function handleSummary(data) {
  return { stdout: data.root_group.checks.map((c) => c.name + '=' + c.passes).join(',') };
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, "nested=2,first=2,bound=2,native=2,last=2", res.stdout)
}

func TestRun_HandleSummaryErrorFallsBackToText(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 1 };
export default function () {}
export function handleSummary() { throw new Error('summary broke'); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "summary broke")
	assert.Contains(t, res.stdout, "iterations")
}

func TestRun_SummaryHooksAppendSections(t *testing.T) {
	// not parallel: hooks are process-wide
	RegisterSummaryHook(func(w io.Writer) { fmt.Fprintln(w, "█ EXTRA SECTION") })
	defer func() {
		registryMu.Lock()
		hooks = hooks[:len(hooks)-1]
		registryMu.Unlock()
	}()
	res := runScript(t, `export default function () {}`, nil)
	require.NoError(t, res.err)
	iterAt := strings.Index(res.stdout, "iterations")
	extraAt := strings.Index(res.stdout, "█ EXTRA SECTION")
	require.GreaterOrEqual(t, iterAt, 0, res.stdout)
	assert.Greater(t, extraAt, iterAt, "hook sections come after the metrics")
}

func TestRun_ExecutionAPI(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import exec from 'k6/execution';
import { check } from 'k6';
export const options = { scenarios: { main: { executor: 'per-vu-iterations', vus: 2, iterations: 3, tags: { team: 'a' } } } };
export default function () {
  exec.vu.metrics.tags.custom = 'yes';
  check(exec, {
    'scenario name': (e) => e.scenario.name === 'main' && e.scenario.executor === 'per-vu-iterations',
    'vu ids': (e) => e.vu.idInTest >= 1 && e.vu.idInTest <= 2 && __VU === e.vu.idInTest,
    'iteration counters': (e) => e.vu.iterationInScenario === __ITER && __ITER < 3,
    'vu tags': (e) => e.vu.metrics.tags.team === 'a' && e.vu.metrics.tags.scenario === 'main',
    'instance': (e) => e.instance.vusInitialized === 2 && e.instance.currentTestRunDuration >= 0,
    'options': (e) => e.test.options.scenarios.main.vus === 2,
  });
}
export function handleSummary(data) { return { stdout: JSON.stringify(data.metrics.checks.values) }; }
`, func(c *Config) { c.SummaryExport = "" })
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stdout, `"fails":0`)
	assert.Contains(t, res.stdout, `"passes":36`)
}

func TestRun_ExecutionAPIThrowsInInit(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import exec from 'k6/execution';
const n = exec.vu.idInTest;
export default function () {}
`, nil)
	require.Error(t, res.err)
	assert.Equal(t, ExitScriptException, ExitCode(res.err))
	assert.Contains(t, res.err.Error(), "init context")
}

func TestRun_MetricsModule(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { Counter, Gauge, Rate, Trend } from 'k6/metrics';
const c = new Counter('c_total');
const g = new Gauge('g_now');
const r = new Rate('r_ok');
const tr = new Trend('t_lat', true);
export const options = { iterations: 4, thresholds: { c_total: ['count==8'], g_now: ['value==7'], r_ok: ['rate==0.5'], t_lat: ['max==40'] } };
export default function () {
  c.add(2);
  g.add(7);
  r.add(__ITER % 2 === 0);
  tr.add(10 * (__ITER + 1));
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 8.0, res.metric(t, "c_total", "count"))
	assert.Equal(t, 0.5, res.metric(t, "r_ok", "value"))
}

func TestRun_MetricDeclaredOutsideInitThrows(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { Counter } from 'k6/metrics';
export const options = { iterations: 1 };
export default function () { new Counter('late'); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "init context")
}

func TestRun_AsyncDefaultAndTopLevelAwait(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { check } from 'k6';
const base = await Promise.resolve(40);
export const options = { iterations: 3, thresholds: { checks: ['rate==1'] } };
export default async function () {
  const v = await new Promise((resolve) => resolve(base + 2));
  check(v, { 'awaited': (x) => x === 42 });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 3.0, res.metric(t, "checks", "passes"))
}

func TestRun_RejectedPromiseIsAnIterationError(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 2 };
export default async function () { throw new Error('async boom'); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "async boom")
	assert.Equal(t, 2.0, res.metric(t, "iterations", "count"), "an iteration that throws still counts, as in k6")
}

// asyncModule exports delayed(v): a Promise resolved with v from another
// goroutine, through the VU's event loop.
type asyncModule struct{}

func (asyncModule) NewModuleInstance(vu VU) ModuleInstance {
	rt := vu.Runtime()
	delayed := func(v sobek.Value) *sobek.Object {
		p, resolve, _ := rt.NewPromise()
		done := vu.RegisterCallback()
		n := v.ToInteger()
		go func() {
			time.Sleep(time.Millisecond)
			done(func() error { return resolve(n) })
		}()
		return rt.ToValue(p).ToObject(rt)
	}
	failing := func() *sobek.Object {
		p, _, _ := rt.NewPromise()
		done := vu.RegisterCallback()
		go done(func() error { return errors.New("callback failed") })
		return rt.ToValue(p).ToObject(rt)
	}
	return ExportsFunc(func() Exports {
		return Exports{Named: map[string]any{"delayed": delayed, "failing": failing, "inInit": vu.InInit()}}
	})
}

var registerAsyncOnce sync.Once

func registerAsync() {
	registerAsyncOnce.Do(func() { Register("k6/x/testasync", asyncModule{}) })
}

func TestRun_PromiseResolvedFromGoroutine(t *testing.T) {
	t.Parallel()
	registerAsync()
	res := runScript(t, `
import { check } from 'k6';
import { delayed, inInit } from 'k6/x/testasync';
import testasync from 'k6/x/testasync';
export const options = { vus: 2, iterations: 6, thresholds: { checks: ['rate==1'] } };
export default async function () {
  const [a, b] = await Promise.all([delayed(__ITER), testasync.delayed(5)]);
  check(a, { 'resolved from Go': (v) => v === __ITER && b === 5 && inInit === true });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 6.0, res.metric(t, "checks", "passes"))
}

func TestRun_CallbackErrorFailsTheIteration(t *testing.T) {
	t.Parallel()
	registerAsync()
	res := runScript(t, `
import { failing } from 'k6/x/testasync';
export const options = { iterations: 1 };
export default async function () { await failing(); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "callback failed")
}

var registerPushOnce sync.Once

// testPushModule exports hit(), which pushes a plugin_hits sample from Go.
func testPushModule(vu VU) ModuleInstance {
	m, err := vu.Registry().Register("plugin_hits", metrics.Counter, metrics.Default)
	if err != nil {
		panic(err)
	}
	tagged := metrics.NewTags(map[string]string{"src": "tagged"})
	return ExportsFunc(func() Exports {
		return Exports{Default: map[string]any{
			"hit":       func() { vu.Push(m, 1, map[string]string{"src": "go"}) },
			"hitTagged": func() { vu.PushTagged(m, 1, tagged) },
		}}
	})
}

func TestRun_PushFromModuleCarriesVUTags(t *testing.T) {
	t.Parallel()
	registerPushOnce.Do(func() { Register("k6/x/testpush", ModuleFunc(testPushModule)) })
	res := runScript(t, `
import plugin from 'k6/x/testpush';
export const options = { iterations: 3, thresholds: { 'plugin_hits{scenario:default,src:go}': ['count==3'] } };
export default function () { plugin.hit(); }
`, nil)
	require.NoError(t, res.err, res.stderr)
}

// TestRun_PushTaggedFollowsTheVUsTags: PushTagged caches its merges, yet a
// sample carries the VU's tags of the moment (here the group).
func TestRun_PushTaggedFollowsTheVUsTags(t *testing.T) {
	t.Parallel()
	registerPushOnce.Do(func() { Register("k6/x/testpush", ModuleFunc(testPushModule)) })
	res := runScript(t, `
import plugin from 'k6/x/testpush';
import { group } from 'k6';
export const options = { iterations: 3, thresholds: {
  'plugin_hits{src:tagged}': ['count==6'],
  'plugin_hits{src:tagged,group:::g}': ['count==3'],
  'plugin_hits{src:tagged,scenario:default}': ['count==6'],
} };
export default function () { plugin.hitTagged(); group('g', () => plugin.hitTagged()); }
`, nil)
	require.NoError(t, res.err, res.stderr)
}

func TestRun_RandomSeedMakesMathRandomRepeatable(t *testing.T) {
	t.Parallel()
	src := `
import { randomSeed } from 'k6';
export const options = { iterations: 1 };
export default function () {}
export function handleSummary() { randomSeed(7); return { stdout: String(Math.random()) }; }
`
	a := runScript(t, src, nil)
	b := runScript(t, src, nil)
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	assert.Equal(t, a.stdout, b.stdout)
	assert.NotEmpty(t, a.stdout)
}

func TestRun_ContextCancelStopsSleepingVUs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.js")
	require.NoError(t, writeFile(path, `
import { sleep } from 'k6';
export const options = { vus: 2, duration: '1h' };
export default function () { sleep(3600); }
`))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	var out bytes.Buffer
	err := Run(ctx, Config{Script: path, Stdout: &out, Stderr: io.Discard, Quiet: true})
	require.Error(t, err)
	assert.Equal(t, ExitExternalAbort, ExitCode(err))
	assert.Contains(t, out.String(), "vus_max", "the summary is still written")
}

var registerWaitOnce sync.Once

// testWaitModule exports arm(), which registers a WhenWaiting hook that
// pushes a waited sample when it runs.
func testWaitModule(vu VU) ModuleInstance {
	m, err := vu.Registry().Register("plugin_waited", metrics.Counter, metrics.Default)
	if err != nil {
		panic(err)
	}
	return ExportsFunc(func() Exports {
		return Exports{Default: map[string]any{"arm": func() {
			vu.WhenWaiting(func() { vu.Push(m, 1, nil) })
		}}}
	})
}

// TestRun_WhenWaitingRunsBeforeTheVUWaits: a hook runs once, at the VU's
// next wait — a sleep() — and, when the VU never sleeps, when it stops
// running iterations.
func TestRun_WhenWaitingRunsBeforeTheVUWaits(t *testing.T) {
	t.Parallel()
	registerWaitOnce.Do(func() { Register("k6/x/testwait", ModuleFunc(testWaitModule)) })
	for _, clock := range []struct {
		name string
		mod  func(*Config)
	}{{"wall", nil}, {"virtual", virtual}} {
		t.Run(clock.name, func(t *testing.T) {
			sleeping := runScript(t, `
import plugin from 'k6/x/testwait';
import { sleep } from 'k6';
export const options = { vus: 1, iterations: 3, thresholds: { plugin_waited: ['count==3'] } };
export default function () { plugin.arm(); sleep(0.01); }
`, clock.mod)
			require.NoError(t, sleeping.err, sleeping.stderr)
			stopping := runScript(t, `
import plugin from 'k6/x/testwait';
export const options = { vus: 1, iterations: 2, thresholds: { plugin_waited: ['count==2'] } };
export default function () { plugin.arm(); }
`, clock.mod)
			require.NoError(t, stopping.err, stopping.stderr)
		})
	}
}

// TestVU_MergedWithMatchesMerge: the merges PushTagged keeps (the last two
// and the cache) give what merging anew gives, for extra tag sets taken in
// turns that overflow the last two, and after the VU's tags change.
func TestVU_MergedWithMatchesMerge(t *testing.T) {
	v := &vu{tags: metrics.NewTags(map[string]string{"scenario": "s", "group": ""})}
	extras := []metrics.Tags{
		metrics.NewTags(map[string]string{"outcome": "completed"}),
		metrics.NewTags(map[string]string{"role": "prefill"}),
		metrics.NewTags(map[string]string{"outcome": "aborted", "scenario": "over"}),
	}
	tagMap := func(tags metrics.Tags) map[string]string {
		m := map[string]string{}
		for k, val := range tags.All() {
			m[k] = val
		}
		return m
	}
	for round := range 3 {
		if round == 2 {
			v.tags = v.tags.With("group", "::g")
		}
		for _, i := range []int{0, 1, 0, 2, 1, 1, 2, 0} {
			want := tagMap(v.tags.Merge(extras[i]))
			assert.Equal(t, want, tagMap(v.mergedWith(extras[i])), "round %d, extra %d", round, i)
		}
	}
}
