package xk6mocker

import (
	"context"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/harness"
)

// copiedScripts are the scripts users copy: every script in scripts/ and
// the README's example, as paths runScriptCtx takes (relative to testdata).
func copiedScripts(t *testing.T) []string {
	t.Helper()
	scripts, err := filepath.Glob(filepath.Join("..", "scripts", "*.js"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts)
	sort.Strings(scripts)
	out := []string{filepath.Base(readmeExample)}
	for _, s := range scripts {
		rel, err := filepath.Rel("testdata", s)
		require.NoError(t, err)
		out = append(out, rel)
	}
	return out
}

// brokenClusters are the ways the tests break a cluster mid-run, each with
// the threshold every copied script must have crossed because of it.
var brokenClusters = []struct {
	name  string
	fault fault
	// metric is the threshold's key as the exit error names it; crossed
	// matches its failed line in the summary.
	metric  string
	crossed *regexp.Regexp
}{
	{
		name:    "every request refused",
		fault:   fault{After: 100},
		metric:  "mocker_requests{outcome:error}",
		crossed: regexp.MustCompile(`\{outcome:error\}\n +✗ 'count==0' count=[1-9]`),
	},
	{
		name:    "no request answered",
		fault:   fault{After: 100, Hang: true},
		metric:  MetricRequestsLost,
		crossed: regexp.MustCompile(`(?m)^ +mocker_requests_lost\n +✗ 'count==0' count=[1-9]`),
	},
}

// TestScripts_FailOnABrokenCluster: every script users copy, run on a
// cluster that breaks after its first 100 requests — every later request
// refused with an error, or never answered — exits 99 and names the
// threshold that caught it, although the holds, aborts and latencies its
// other thresholds assert on happened before the break. The cluster itself
// still drains and keeps its invariants (runScriptCtx checks).
func TestScripts_FailOnABrokenCluster(t *testing.T) {
	for _, script := range copiedScripts(t) {
		for _, bc := range brokenClusters {
			t.Run(filepath.Base(script)+"/"+bc.name, func(t *testing.T) {
				ctx := withFault(context.Background(), bc.fault)
				res := runScriptCtx(t, ctx, script, nil, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
				require.Equalf(t, harness.ExitThresholdsFailed, res.code, "err: %v\nstdout:\n%s\nstderr:\n%s", res.err, res.stdout, res.stderr)
				assert.Contains(t, res.err.Error(), bc.metric, "the exit error names the threshold")
				assert.Regexp(t, bc.crossed, res.stdout, "the summary shows the threshold crossed")
			})
		}
	}
}

// TestScripts_FailOnABrokenClusterOnTheWallClock: the refusals caught on
// --clock wall too, where the cluster runs on its own loop rather than on
// the run's clock, for a short quickstart. (A hung request waits out its
// scenario's gracefulStop, 30 s of wall time here: the virtual clock's
// runs above cover it.) The cluster breaks after its first request, so
// that a busy host, which runs few of the 2 s ramp's iterations, still
// has later ones refused (a break after 20 once met a host that ran 13).
func TestScripts_FailOnABrokenClusterOnTheWallClock(t *testing.T) {
	quickstart, err := filepath.Rel("testdata", filepath.Join("..", "scripts", "quickstart.js"))
	require.NoError(t, err)
	bc := brokenClusters[0]
	require.False(t, bc.fault.Hang)
	env := map[string]string{"DURATION": "2s", "VUS": "4"}
	ctx := withFault(context.Background(), fault{After: 1})
	res := runScriptCtx(t, ctx, quickstart, env, func(c *harness.Config) { c.Clock = harness.ClockWall })
	require.Equalf(t, harness.ExitThresholdsFailed, res.code, "err: %v\nstdout:\n%s\nstderr:\n%s", res.err, res.stdout, res.stderr)
	assert.Contains(t, res.err.Error(), bc.metric)
	assert.Regexp(t, bc.crossed, res.stdout)
}
