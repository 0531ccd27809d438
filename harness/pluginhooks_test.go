package harness

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// observerModule is a plugin for tests: "k6/x/observer". The first
// instance of a run watches the run's summary data.
type observerModule struct{}

var observed = struct {
	sync.Mutex
	data map[uint64][]map[string]any // run ID -> the data each call saw
}{data: map[uint64][]map[string]any{}}

func (observerModule) NewModuleInstance(vu VU) ModuleInstance {
	rc := vu.Run()
	id := rc.ID()
	observed.Lock()
	_, seen := observed.data[id]
	if !seen {
		observed.data[id] = nil
	}
	observed.Unlock()
	if so, ok := rc.(SummaryObserverRun); ok && !seen {
		so.OnSummaryData(func(data map[string]any) {
			observed.Lock()
			observed.data[id] = append(observed.data[id], data)
			observed.Unlock()
		})
		so.OnSummaryData(func(map[string]any) { panic("observer bug") })
	}
	return ExportsFunc(func() Exports { return Exports{Named: map[string]any{}} })
}

func init() { Register("k6/x/observer", observerModule{}) }

func TestSummaryObserver_SeesTheDataOnceEvenWithHandleSummary(t *testing.T) {
	// Only this test imports the observer: start from nothing, so that a
	// repeated run (-count) sees its own run alone.
	observed.Lock()
	clear(observed.data)
	observed.Unlock()
	res := runScript(t, `
import 'k6/x/observer';
import 'k6/x/datum';
export const options = { iterations: 2 };
export default function () {}
export function handleSummary() { return { stdout: 'custom' }; }
`, nil)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, "custom", res.stdout, "an observer does not change what handleSummary writes")
	assert.Contains(t, res.stderr, "a plugin's summary data observer panicked", "a panicking observer is logged")
	observed.Lock()
	defer observed.Unlock()
	var calls [][]map[string]any
	for _, d := range observed.data {
		for _, data := range d {
			if _, ok := data["datum"]; ok { // this test's run
				calls = append(calls, d)
			}
		}
	}
	require.Len(t, calls, 1, "one run observed")
	require.Len(t, calls[0], 1, "observed once")
	data := calls[0][0]
	assert.Contains(t, data, "metrics")
	assert.Contains(t, data, "root_group")
	iters := data["metrics"].(map[string]any)["iterations"].(map[string]any)["values"].(map[string]any)
	assert.InDelta(t, 2.0, iters["count"], 0)
}

func TestProgress_PluginTextFollowsTheScenarioRows(t *testing.T) {
	t.Parallel()
	tr := finishedRun(0)
	tr.AddProgress(func() string { return "cluster a  held 3/9\ncluster b  held 0/0\n" })
	tr.AddProgress(func() string { return "" })
	lines := newProgress(tr).lines()
	require.GreaterOrEqual(t, len(lines), 4)
	assert.Equal(t, []string{"cluster a  held 3/9", "cluster b  held 0/0"}, lines[len(lines)-2:])
}
