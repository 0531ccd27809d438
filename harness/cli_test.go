package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runBinary runs the built mocker binary with args in testdata and
// returns its exit code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(mockerBin, args...)
	cmd.Dir = "testdata"
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

func TestCLI_ExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		code       int
		stderrHas  []string
		stdoutHas  []string
		stderrLack []string
	}{
		{name: "ok", args: []string{"run", "-q", "ok.js"}, code: ExitOK, stdoutHas: []string{"THRESHOLDS", "one is one"}},
		{name: "thresholds crossed", args: []string{"run", "-q", "thresholds_fail.js"}, code: ExitThresholdsFailed,
			stderrHas: []string{"thresholds on metrics 'things' have been crossed"}},
		{name: "unknown metric", args: []string{"run", "-q", "unknown_metric.js"}, code: ExitInvalidConfig,
			stderrHas: []string{"no_such_metric"}},
		{name: "aggregation invalid for the type", args: []string{"run", "-q", "bad_aggregation.js"}, code: ExitInvalidConfig,
			stderrHas: []string{"p(95)"}},
		{name: "bad executor field", args: []string{"run", "-q", "bad_executor.js"}, code: ExitInvalidConfig,
			stderrHas: []string{`scenarios.ramp.stages[1].duration: invalid duration "5x"`}},
		{name: "exception in init", args: []string{"run", "-q", "init_exception.js"}, code: ExitScriptException,
			stderrHas: []string{"boom in init", "at explode", "init_exception.js:1"}},
		{name: "exception in setup", args: []string{"run", "-q", "setup_exception.js"}, code: ExitScriptException,
			stderrHas: []string{"boom in setup", "at setup"}},
		{name: "exception in default is logged, test goes on (as k6)", args: []string{"run", "-q", "default_exception.js"}, code: ExitOK,
			stderrHas: []string{"boom in default", "default_exception.js:2"}},
		{name: "exec.test.abort", args: []string{"run", "-q", "abort.js"}, code: ExitScriptAborted,
			stderrHas: []string{"enough"}},
		{name: "exec.test.fail", args: []string{"run", "-q", "fail.js"}, code: ExitTestFailed,
			stderrHas: []string{"marked"}, stdoutHas: []string{"after_fail"}},
		{name: "flags after the script are accepted", args: []string{"run", "ok.js", "-q", "-i", "7", "-u", "1"}, code: ExitThresholdsFailed,
			stderrHas: []string{"iterations"}, stderrLack: []string{"running ("}},
		{name: "flags on both sides of the script", args: []string{"run", "-q", "ok.js", "--iterations", "4"}, code: ExitOK},
		{name: "two scripts", args: []string{"run", "-q", "ok.js", "fail.js"}, code: 2, stderrHas: []string{"one script expected"}},
		{name: "missing script", args: []string{"run", "-q"}, code: 2, stderrHas: []string{"missing the script path"}},
		{name: "bad duration flag", args: []string{"run", "-d", "soon", "ok.js"}, code: ExitInvalidConfig,
			stderrHas: []string{`invalid duration "soon"`}},
		{name: "CLI iterations override the script", args: []string{"run", "-q", "-i", "7", "-u", "1", "ok.js"}, code: ExitThresholdsFailed,
			stderrHas: []string{"iterations"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runBinary(t, nil, tc.args...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, s := range tc.stderrHas {
				assert.Contains(t, stderr, s)
			}
			for _, s := range tc.stdoutHas {
				assert.Contains(t, stdout, s)
			}
			for _, s := range tc.stderrLack {
				assert.NotContains(t, stderr, s)
			}
		})
	}
}

func TestCLI_ENVHoldsTheProcessEnvironmentUnderTheEnvFlags(t *testing.T) {
	t.Parallel()
	procEnv := []string{"FOO=from-process", "MOCKER_TEST_SYSTEM=sys"}
	code, stdout, stderr := runBinary(t, procEnv, "run", "-q", "-e", "FOO=bar", "--env", "OTHER=1", "env.js")
	assert.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, "env ok: system=sys\n", stdout, "-e wins over the process environment, which is present by default")
	assert.NotContains(t, stderr, "scenario env missing")

	code, _, stderr = runBinary(t, procEnv, "run", "-q", "env.js")
	assert.Equal(t, ExitScriptException, code)
	assert.Contains(t, stderr, "__ENV.FOO is from-process")

	code, stdout, stderr = runBinary(t, procEnv, "run", "-q", "-e", "FOO=bar", "--include-system-env-vars=false", "env.js")
	assert.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, "env ok: system=undefined\n", stdout, "the k6 form --include-system-env-vars=false leaves the process out")
}

func TestCLI_HandleSummaryWritesStdoutAndFiles(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "out.json")
	code, stdout, stderr := runBinary(t, []string{"SUMMARY_FILE=" + file}, "run", "-q", "summary.js")
	require.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, "custom summary: iterations=2\n", stdout, "handleSummary replaces the text summary")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var got map[string]float64
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, 2.0, got["checks"])
}

func TestCLI_JSONOutputIsNDJSON(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "samples.json")
	code, _, stderr := runBinary(t, nil, "run", "-q", "--out", "json="+file, "ok.js")
	require.Equal(t, ExitOK, code, stderr)
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	points := map[string]int{}
	metricsSeen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Type   string `json:"type"`
			Metric string `json:"metric"`
			Data   struct {
				Tags map[string]string `json:"tags"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		switch line.Type {
		case "Metric":
			metricsSeen[line.Metric] = true
		case "Point":
			require.True(t, metricsSeen[line.Metric], "a Point for %s before its Metric line", line.Metric)
			points[line.Metric]++
			if line.Metric == "iterations" {
				assert.Equal(t, "default", line.Data.Tags["scenario"])
			}
			if line.Metric == "checks" {
				assert.Equal(t, "one is one", line.Data.Tags["check"])
			}
		default:
			t.Fatalf("unexpected line type %q", line.Type)
		}
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, 4, points["iterations"])
	assert.Equal(t, 4, points["iteration_duration"])
	assert.Equal(t, 4, points["checks"])
}

func TestCLI_SummaryExportIsLegacyShape(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "export.json")
	code, _, stderr := runBinary(t, nil, "run", "-q", "--summary-export", file, "--summary-trend-stats", "avg,p(99)", "thresholds_fail.js")
	require.Equal(t, ExitThresholdsFailed, code, stderr)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var got struct {
		Metrics map[string]map[string]any `json:"metrics"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	things := got.Metrics["things"]
	assert.Equal(t, 3.0, things["count"])
	assert.Equal(t, map[string]any{"count>100": true}, things["thresholds"], "true marks a FAILED threshold")
	dur := got.Metrics["iteration_duration"]
	assert.Contains(t, dur, "p(99)")
	assert.NotContains(t, dur, "p(95)")
}

func TestCLI_ProgressGoesToStderrUnlessQuiet(t *testing.T) {
	t.Parallel()
	_, stdout, stderr := runBinary(t, nil, "run", "ok.js")
	assert.Contains(t, stderr, "running (")
	assert.NotContains(t, stdout, "running (")
	_, _, stderr = runBinary(t, nil, "run", "-q", "ok.js")
	assert.False(t, strings.Contains(stderr, "running ("))
}

func TestCLI_BannerGoesToStderrBeforeTheProgressUnlessQuiet(t *testing.T) {
	t.Parallel()
	samples := filepath.Join(t.TempDir(), "samples.json")
	code, stdout, stderr := runBinary(t, nil, "run", "-o", "json="+samples, "ok.js")
	require.Equal(t, ExitOK, code, stderr)
	for _, want := range []string{
		"script: ok.js\n",
		"output: json (" + samples + ")\n",
		"scenarios: 1 scenario, 2 max VUs, 10m30s max duration (incl. graceful stop):\n",
		"* default: 4 iterations shared among 2 VUs (maxDuration: 10m, gracefulStop: 30s)\n",
	} {
		assert.Contains(t, stderr, want)
	}
	assert.Less(t, strings.Index(stderr, "scenarios:"), strings.Index(stderr, "running ("), "the banner comes before the test starts")
	assert.Equal(t, 1, strings.Count(stderr, "scenarios:"), "one banner")
	assert.NotContains(t, stdout, "scenarios:", "stdout holds the summary only")
	assert.NotContains(t, stdout, "script:")

	for _, quiet := range []string{"-q", "--quiet"} {
		code, stdout, stderr = runBinary(t, nil, "run", quiet, "ok.js")
		require.Equal(t, ExitOK, code, stderr)
		assert.NotContains(t, stderr, "scenarios:", quiet)
		assert.NotContains(t, stderr, "script:", quiet)
		assert.NotContains(t, stdout, "scenarios:", quiet)
	}
}

func TestCLI_NonTerminalStderrHasNoEscapeCodes(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, nil, "run", "default_exception.js")
	require.Equal(t, ExitOK, code, stderr)
	assert.NotContains(t, stderr, "\x1b[", "stderr is a pipe here")
	assert.NotContains(t, stdout, "\x1b[", "stdout is a pipe here")
}
