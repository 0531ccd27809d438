package harness

import (
	"encoding/json"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// datumModule is a plugin for tests: "k6/x/datum". The first instance of a
// run adds the summary data key "datum" and counts how often it is read.
type datumModule struct{}

var datums = struct {
	sync.Mutex
	calls map[uint64]int // run ID -> calls of the data function
}{calls: map[uint64]int{}}

func (datumModule) NewModuleInstance(vu VU) ModuleInstance {
	rc := vu.Run()
	id := rc.ID()
	datums.Lock()
	_, added := datums.calls[id]
	datums.calls[id] += 0
	datums.Unlock()
	if sd, ok := rc.(SummaryDataRun); ok && !added {
		sd.AddSummaryData("datum", func() any {
			datums.Lock()
			datums.calls[id]++
			datums.Unlock()
			return map[string]any{"run": id, "figures": []int{1, 2, 3}}
		})
	}
	return ExportsFunc(func() Exports { return Exports{Named: map[string]any{}} })
}

func init() { Register("k6/x/datum", datumModule{}) }

func TestSummaryData_InHandleSummaryAndTheExport(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import 'k6/x/datum';
export const options = { iterations: 1 };
export default function () {}
export function handleSummary(data) {
  return { stdout: JSON.stringify({ datum: data.datum, keys: Object.keys(data).sort() }) };
}
`, nil)
	require.NoError(t, res.err, res.stderr)
	var got struct {
		Datum struct {
			Run     float64 `json:"run"`
			Figures []int   `json:"figures"`
		} `json:"datum"`
		Keys []string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got), res.stdout)
	assert.Equal(t, []int{1, 2, 3}, got.Datum.Figures, "handleSummary's data has the plugin's key")
	require.Positive(t, got.Datum.Run)
	datums.Lock()
	calls := datums.calls[uint64(got.Datum.Run)]
	datums.Unlock()
	assert.Equal(t, 1, calls, "the data function is called once, for handleSummary and the export alike")
	assert.Equal(t, []string{"datum", "metrics", "options", "root_group", "state"}, got.Keys, "k6's keys plus the plugin's")

	require.NotNil(t, res.summary, "the export was written")
	keys := make([]string, 0, len(res.summary))
	for k := range res.summary {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	assert.Equal(t, []string{"datum", "metrics", "root_group"}, keys, "the export keeps k6's legacy shape and adds the plugin's key")
	datum, _ := res.summary["datum"].(map[string]any)
	assert.Equal(t, got.Datum.Run, datum["run"], "the export and handleSummary see the same value")
	_, ok := res.summary["metrics"].(map[string]any)["iterations"]
	assert.True(t, ok, "k6's metrics are still there")
}

func TestSummaryData_RefusesK6KeysAndDuplicates(t *testing.T) {
	t.Parallel()
	f := func() any { return 1 }
	for _, key := range []string{"", "metrics", "root_group", "options", "state", "setup_data"} {
		assert.Panicsf(t, func() { (&testRun{}).AddSummaryData(key, f) }, "key %q", key)
	}
	tr := &testRun{}
	assert.NotPanics(t, func() { tr.AddSummaryData("mine", f) })
	assert.Panics(t, func() { tr.AddSummaryData("mine", f) }, "a key added twice")
	data := map[string]any{"metrics": "k6's"}
	assert.Equal(t, map[string]any{"mine": 1}, tr.addSummaryData(data))
	assert.Equal(t, map[string]any{"metrics": "k6's", "mine": 1}, data)
}
