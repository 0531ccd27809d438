package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// mockerBin is the mocker binary built once for the exit-code tests.
var mockerBin string

func TestMain(m *testing.M) {
	if os.Getenv(benchServerEnv) != "" {
		os.Exit(serveForBenchmarks())
	}
	dir, err := os.MkdirTemp("", "harness-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mockerBin = filepath.Join(dir, "mocker")
	build := exec.Command("go", "build", "-o", mockerBin, "../cmd/mocker")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mocker: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// runResult is what one in-process Run produced.
type runResult struct {
	err     error
	stdout  string
	stderr  string
	summary map[string]any // --summary-export content
	export  []byte         // the --summary-export file as written
}

// metric returns a field of one metric from the legacy summary export. It
// fails the test when there is no export, when the metric is missing or
// when the field is: a metric that may legitimately be absent (a counter
// that never got a sample) is read with metricOrZero, so that an assertion
// on 0 says so.
func (r runResult) metric(t *testing.T, name, field string) float64 {
	t.Helper()
	v, ok := r.lookup(t, name, field)
	if !ok {
		t.Fatalf("the summary export has no metric %q; stderr:\n%s", name, r.stderr)
	}
	return v
}

// metricOrZero is metric for a metric that is absent when nothing was
// recorded, which reads as 0. The export itself must exist, and a metric
// that is present must have the field.
func (r runResult) metricOrZero(t *testing.T, name, field string) float64 {
	t.Helper()
	v, ok := r.lookup(t, name, field)
	if !ok {
		return 0
	}
	return v
}

// lookup finds a metric's field; ok is false when the metric is absent.
func (r runResult) lookup(t *testing.T, name, field string) (float64, bool) {
	t.Helper()
	if r.summary == nil {
		t.Fatalf("no summary export was written (run error: %v); stderr:\n%s", r.err, r.stderr)
	}
	ms, ok := r.summary["metrics"].(map[string]any)
	if !ok {
		t.Fatalf("the summary export has no metrics object: %v", r.summary)
	}
	m, ok := ms[name].(map[string]any)
	if !ok {
		return 0, false
	}
	v, ok := m[field].(float64)
	if !ok {
		t.Fatalf("metric %q has no numeric field %q: %v", name, field, m)
	}
	return v, true
}

// runScript runs a script source (written to a temp dir) in process.
func runScript(t *testing.T, src string, mod func(*Config)) runResult {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "script.js")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	return runFile(t, path, mod)
}

func runFile(t *testing.T, path string, mod func(*Config)) runResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	export := filepath.Join(t.TempDir(), "summary.json")
	// The tests here were written for the wall clock, where an iteration
	// that never sleeps takes no time; those on other clocks say so.
	cfg := Config{Script: path, Stdout: &stdout, Stderr: &stderr, Quiet: true, NoColor: true, SummaryExport: export, Clock: ClockWall}
	if mod != nil {
		mod(&cfg)
	}
	err := Run(context.Background(), cfg)
	res := runResult{err: err, stdout: stdout.String(), stderr: stderr.String()}
	if b, rerr := os.ReadFile(export); rerr == nil {
		res.export = b
		require.NoError(t, json.Unmarshal(b, &res.summary))
	}
	return res
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
