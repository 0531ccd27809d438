package harness

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probeModule is a plugin for tests: "k6/x/probe". It counts its
// instances per run and, through the run's hooks, records when the run
// ended and writes a summary section naming the run.
type probeModule struct{}

var probes = struct {
	sync.Mutex
	instances map[uint64]int      // run ID -> NewModuleInstance calls
	events    map[uint64][]string // run ID -> "section", "end"
}{instances: map[uint64]int{}, events: map[uint64][]string{}}

func (probeModule) NewModuleInstance(vu VU) ModuleInstance {
	rc := vu.Run()
	id := rc.ID()
	probes.Lock()
	probes.instances[id]++
	first := probes.instances[id] == 1
	probes.Unlock()
	if first {
		rc.AddSummarySection(func(w io.Writer) {
			probes.Lock()
			probes.events[id] = append(probes.events[id], "section")
			probes.Unlock()
			fmt.Fprintf(w, "\nPROBE SECTION run=%d\n", id)
		})
		rc.OnEnd(func() {
			probes.Lock()
			probes.events[id] = append(probes.events[id], "end")
			probes.Unlock()
		})
	}
	return ExportsFunc(func() Exports {
		return Exports{Named: map[string]any{
			"runID": func() uint64 { return id },
			"hello": func() string { return "hi" },
		}}
	})
}

func init() { Register("k6/x/probe", probeModule{}) }

func probeState(id uint64) (instances int, events []string) {
	probes.Lock()
	defer probes.Unlock()
	return probes.instances[id], append([]string(nil), probes.events[id]...)
}

// runIDFrom reads the "run=N" a probe script prints.
func runIDFrom(t *testing.T, out string) uint64 {
	t.Helper()
	_, after, ok := strings.Cut(out, "run=")
	require.True(t, ok, "no run id in %q", out)
	var id uint64
	_, err := fmt.Sscanf(after, "%d", &id)
	require.NoError(t, err)
	return id
}

func TestModules_NamespaceImportsHaveNamedExportsInEveryVU(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import * as k6 from 'k6';
import * as metrics from 'k6/metrics';
import * as exec from 'k6/execution';
import * as probe from 'k6/x/probe';
const c = new metrics.Counter('made_in_init');
const initKeys = [k6, metrics, exec, probe].map((ns) => Object.keys(ns).join(',')).join(' | ');
export const options = { vus: 2, iterations: 2, thresholds: { made_in_init: ['count==2'], checks: ['rate==1'] } };
export function setup() {
  k6.sleep(0.001);
  return { keys: initKeys, hello: probe.hello() };
}
export default function (d) {
  c.add(1);
  k6.check(d, {
    'VU 0 and this VU see the same names': (x) => x.keys === initKeys,
    'plugin named export works in VU 0': (x) => x.hello === 'hi',
    'k6 names': (x) => x.keys.startsWith('check,default,fail,group,randomSeed,sleep | Counter,Gauge,Rate,Trend,default'),
  });
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 6.0, res.metric(t, "checks", "passes"))
}

func TestModules_UnknownNamedImportIsASyntaxErrorNamingTheExport(t *testing.T) {
	t.Parallel()
	for _, mod := range []string{"k6", "k6/metrics", "k6/x/probe"} {
		t.Run(mod, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, fmt.Sprintf(`
import { nosuch } from '%s';
export default function () { nosuch(); }
`, mod), nil)
			require.Error(t, res.err)
			assert.Equal(t, ExitScriptException, ExitCode(res.err))
			assert.Contains(t, res.err.Error(), "SyntaxError")
			assert.Contains(t, res.err.Error(), fmt.Sprintf(`module %q does not provide an export named "nosuch"`, mod))
		})
	}
}

func TestModules_EachVUGetsOneInstance(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { runID } from 'k6/x/probe';
import * as again from 'k6/x/probe';
export const options = { vus: 3, iterations: 3 };
export default function () {}
export function handleSummary() { return { stdout: 'run=' + again.runID() + '\n' }; }
`, nil)
	require.NoError(t, res.err, res.stderr)
	n, _ := probeState(runIDFrom(t, res.stdout))
	assert.Equal(t, 4, n, "VU 0 plus three VUs, each with one instance")
}

func TestRunContext_EndHookRunsOnceAfterTheSummaryWhateverTheOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		code       int
	}{
		{"passed", `export default function () {}`, ExitOK},
		{"exec.test.abort", `import exec from 'k6/execution';
export default function () { exec.test.abort('stop'); }`, ExitScriptAborted},
		{"thresholds crossed", `export const options = { thresholds: { iterations: ['count>5'] } };
export default function () {}`, ExitThresholdsFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, "import { runID } from 'k6/x/probe';\n"+tc.body, nil)
			assert.Equal(t, tc.code, ExitCode(res.err), res.stderr)
			id := runIDFrom(t, res.stdout)
			_, events := probeState(id)
			assert.Equal(t, []string{"section", "end"}, events)
		})
	}
}

func TestRunContext_EndHookRunsWhenInitFails(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { runID } from 'k6/x/probe';
console.log('run=' + runID());
throw new Error('init broke');
`, nil)
	require.Equal(t, ExitScriptException, ExitCode(res.err))
	_, events := probeState(runIDFrom(t, res.stderr))
	assert.Equal(t, []string{"end"}, events, "no summary, but the run still ends")
}

func TestRunContext_ConcurrentRunsOnlyPrintTheirOwnSections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.js")
	require.NoError(t, writeFile(path, `
import { runID } from 'k6/x/probe';
import { sleep } from 'k6';
export const options = { vus: 2, iterations: 4 };
export default function () { sleep(0.01); }
`))
	const runs = 4
	results := make([]runResult, runs)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = runFile(t, path, nil) })
	}
	wg.Wait()
	var ids []uint64
	for _, r := range results {
		require.NoError(t, r.err, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stdout, "PROBE SECTION"), r.stdout)
		ids = append(ids, runIDFrom(t, r.stdout))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i := 1; i < len(ids); i++ {
		assert.NotEqual(t, ids[i-1], ids[i], "every run has its own ID")
	}
}
