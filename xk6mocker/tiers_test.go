package xk6mocker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/harness"
)

// TestTiers_EveryTierFigureReachesEveryOutput runs a cluster whose prefix
// hits reach every KV tier and requires each tier figure (a g<n>_ key of
// cluster.Stats, cluster.WorkerStats and ClusterSummary; the first two
// also hold every tier figure of engine.Metrics) to be non-zero in
// the stats object the script reads, in the summary data handleSummary
// and --summary-export carry, and in the stats' JSON: a tier field that
// one of them drops fails here.
func TestTiers_EveryTierFigureReachesEveryOutput(t *testing.T) {
	tierKeys := func(typ reflect.Type) []string {
		var out []string
		for _, k := range jsonNames(typ) {
			if regexp.MustCompile(`^g\d_`).MatchString(k) {
				out = append(out, k)
			}
		}
		require.NotEmpty(t, out, "%s has no tier figures", typ)
		return out
	}
	statsKeys, workerKeys := tierKeys(reflect.TypeFor[cluster.Stats]()), tierKeys(reflect.TypeFor[cluster.WorkerStats]())
	summaryKeys := tierKeys(reflect.TypeFor[ClusterSummary]())
	for _, k := range jsonNames(reflect.TypeFor[cluster.TierStats]()) {
		assert.Contains(t, statsKeys, k)
		assert.Contains(t, workerKeys, k)
		assert.Contains(t, summaryKeys, k)
	}
	// Every tier figure a worker's engine reports is in WorkerStats.
	metrics := reflect.TypeFor[engine.Metrics]()
	for i := range metrics.NumField() {
		if name := metrics.Field(i).Name; regexp.MustCompile(`^G\d`).MatchString(name) {
			_, ok := reflect.TypeFor[cluster.WorkerStats]().FieldByName(name)
			assert.Truef(t, ok, "engine.Metrics has %s; cluster.WorkerStats lacks it", name)
		}
	}
	nonZero := func(where string, obj map[string]any, keys []string) {
		t.Helper()
		for _, k := range keys {
			v, ok := obj[k].(float64)
			assert.Truef(t, ok && v > 0, "%s: %s is %v, want a positive number", where, k, obj[k])
		}
	}
	export := filepath.Join(t.TempDir(), "summary.json")
	res := runScriptWith(t, "tiers.js", nil, func(c *harness.Config) {
		c.Clock = harness.ClockVirtual
		c.SummaryExport = export
	})
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)

	var fromScript struct {
		Mocker struct {
			Clusters map[string]map[string]any `json:"clusters"`
		} `json:"mocker"`
		Stats map[string]any `json:"stats"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &fromScript), "handleSummary printed %q", res.stdout)
	nonZero("the script's stats()", fromScript.Stats, statsKeys)
	workers, _ := fromScript.Stats["workers"].([]any)
	require.Len(t, workers, 2)
	for _, w := range workers {
		nonZero("the script's stats().workers[]", w.(map[string]any), workerKeys)
	}
	nonZero("handleSummary's data.mocker.clusters.tiers", fromScript.Mocker.Clusters["tiers"], summaryKeys)

	raw, err := os.ReadFile(export)
	require.NoError(t, err)
	var exported struct {
		Mocker struct {
			Clusters map[string]map[string]any `json:"clusters"`
		} `json:"mocker"`
	}
	require.NoError(t, json.Unmarshal(raw, &exported))
	nonZero("--summary-export's mocker.clusters.tiers", exported.Mocker.Clusters["tiers"], summaryKeys)

	require.Len(t, res.clusters, 1)
	b, err := json.Marshal(res.clusters[0].stats)
	require.NoError(t, err)
	var asJSON map[string]any
	require.NoError(t, json.Unmarshal(b, &asJSON))
	nonZero("cluster.Stats' JSON", asJSON, statsKeys)
	workers, _ = asJSON["workers"].([]any)
	require.Len(t, workers, 2)
	for _, w := range workers {
		nonZero("cluster.Stats' JSON workers[]", w.(map[string]any), workerKeys)
	}
}
