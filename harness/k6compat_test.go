package harness

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestK6Compat_Corpus runs the small scripts of testdata/k6compat, one k6
// behaviour each, and compares the outcome with what k6's documentation
// gives for it: the exit code and key values of the --summary-export.
// values holds "path/in/the/export" → number, where the path's parts are
// separated by "/" (metric names and check names contain other
// punctuation). A case whose expectation differs from k6 says so in
// differs.
func TestK6Compat_Corpus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		script    string
		code      int
		values    map[string]float64
		less      map[string]float64 // path → an upper bound (exclusive)
		planned   float64            // started plus dropped iterations, for the arrival-rate executors
		absent    []string           // metrics k6 leaves out of the summary
		stdoutHas []string
		stderrHas []string
		errHas    string
		lacks     []string // text stderr must not have
		differs   string   // how, and why, the expectation differs from k6
	}{
		{script: "executor_shared_iterations.js", values: map[string]float64{"metrics/iterations/count": 10, "metrics/vus_max/value": 3},
			absent: []string{"dropped_iterations"}},
		{script: "executor_per_vu_iterations.js", values: map[string]float64{"metrics/iterations/count": 6, "metrics/vus_max/value": 2}},
		{script: "executor_constant_vus.js", values: map[string]float64{"metrics/vus_max/value": 2, "metrics/vus/max": 2}},
		{script: "executor_ramping_vus.js", values: map[string]float64{"metrics/vus_max/value": 3}},
		// Open-model starts are timed on the wall clock: on a loaded machine
		// a start can come late and be dropped, so the plan is what is
		// pinned (k6 counts a late start as dropped too).
		{script: "executor_constant_arrival_rate.js", planned: 10},
		{script: "executor_ramping_arrival_rate.js", planned: 5},
		{script: "shortcut_vus_only.js", values: map[string]float64{"metrics/iterations/count": 3},
			differs: "k6 v1.8.1 ignores `vus` alone (1 iteration, with a warning); k6 v2.1+ runs as many iterations as VUs, which mocker follows"},
		{script: "thresholds_pass.js", values: map[string]float64{"metrics/orders/count": 4, "metrics/latency/avg": 100}},
		{script: "thresholds_fail.js", code: ExitThresholdsFailed, values: map[string]float64{"metrics/orders/count": 3},
			errHas: "thresholds on metrics 'orders' have been crossed"},
		{script: "thresholds_tag_filter.js", values: map[string]float64{"metrics/latency{kind:fast}/max": 5, "metrics/latency{kind:slow}/min": 150}},
		{script: "thresholds_abort_on_fail.js", code: ExitThresholdsFailed, less: map[string]float64{"metrics/iterations/count": 100},
			errHas: "at least one has abortOnFail enabled"},
		{script: "thresholds_empty_metrics.js", code: ExitThresholdsFailed, values: map[string]float64{"metrics/queue/value": 0, "metrics/wait/p(95)": 0},
			errHas: "thresholds on metrics 'queue' have been crossed"},
		{script: "thresholds_http_builtin.js", values: map[string]float64{"metrics/http_req_duration/p(95)": 0}},
		{script: "thresholds_unknown_metric.js", code: ExitInvalidConfig, errHas: "no_such_metric"},
		{script: "checks.js", values: map[string]float64{
			"metrics/checks/passes": 6, "metrics/checks/fails": 2, "metrics/checks/value": 0.75,
			"root_group/checks/status is 200/passes": 2, "root_group/checks/is slow/fails": 2,
		}},
		{script: "groups.js", values: map[string]float64{
			"metrics/group_duration{group:::login}/count":     3,
			"root_group/groups/login/checks/logged in/passes": 3,
		}},
		{script: "exit_abort.js", code: ExitScriptAborted, values: map[string]float64{"metrics/iterations/count": 1}, errHas: "stop here"},
		{script: "exit_test_fail.js", code: ExitTestFailed, values: map[string]float64{"metrics/iterations/count": 3}},
		{script: "exit_init_exception.js", code: ExitScriptException, errHas: "broken init"},
		{script: "exit_setup_exception.js", code: ExitScriptException, errHas: "setup broke", lacks: []string{"ITERATION", "TEARDOWN"}},
		{script: "exit_teardown_exception.js", code: ExitScriptException, errHas: "teardown broke"},
		{script: "exit_iteration_exception.js", values: map[string]float64{"metrics/iterations/count": 4},
			stderrHas: []string{"odd failure", "expected failure"}},
		{script: "exit_invalid_option.js", code: ExitInvalidConfig, errHas: "options.vus"},
		{script: "exit_short_metric_name.js", code: ExitScriptException, errHas: "invalid metric name"},
		{script: "output_handle_summary.js", stdoutHas: []string{"iterations=2 noColor=false\n"}},
		{script: "output_text_summary.js", stdoutHas: []string{"THRESHOLDS", "✓ 'rate==1'", "one is one", "iterations"}},
		{script: "setup_data.js", values: map[string]float64{"metrics/checks/passes": 6}},
		{script: "modules_timers_data_encoding_crypto.js", values: map[string]float64{"metrics/checks/passes": 16}},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.script, ".js"), func(t *testing.T) {
			t.Parallel()
			if tc.differs != "" {
				t.Logf("expected outcome differs from k6: %s", tc.differs)
			}
			res := runFile(t, filepath.Join("testdata", "k6compat", tc.script), func(c *Config) { c.NoColor = false })
			require.Equal(t, tc.code, ExitCode(res.err), "%v\nstderr:\n%s", res.err, res.stderr)
			if tc.errHas != "" {
				require.Error(t, res.err)
				assert.Contains(t, res.err.Error(), tc.errHas)
			}
			for path, want := range tc.values {
				got, ok := exportValue(res.summary, path)
				if assert.True(t, ok, "the summary export has no %s; stderr:\n%s", path, res.stderr) {
					assert.InDelta(t, want, got, 1e-9, path)
				}
			}
			if tc.planned > 0 {
				started, _ := exportValue(res.summary, "metrics/iterations/count")
				dropped, _ := exportValue(res.summary, "metrics/dropped_iterations/count")
				assert.Equal(t, tc.planned, started+dropped, "iterations %v + dropped_iterations %v", started, dropped)
			}
			for path, bound := range tc.less {
				got, ok := exportValue(res.summary, path)
				if assert.True(t, ok, "the summary export has no %s", path) {
					assert.Less(t, got, bound, path)
				}
			}
			for _, m := range tc.absent {
				_, ok := res.summary["metrics"].(map[string]any)[m]
				assert.False(t, ok, "k6 leaves %s out of the summary", m)
			}
			for _, s := range tc.stdoutHas {
				assert.Contains(t, res.stdout, s)
			}
			for _, s := range tc.stderrHas {
				assert.Contains(t, res.stderr, s)
			}
			for _, s := range tc.lacks {
				assert.NotContains(t, res.stderr, s)
			}
		})
	}
}

// exportValue follows a "/"-separated path through the summary export.
func exportValue(export map[string]any, path string) (float64, bool) {
	var cur any = export
	for _, part := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		if cur, ok = m[part]; !ok {
			return 0, false
		}
	}
	f, ok := cur.(float64)
	return f, ok
}
