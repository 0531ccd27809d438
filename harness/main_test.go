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
}

// metric returns a field of one metric from the legacy summary export.
func (r runResult) metric(t *testing.T, name, field string) float64 {
	t.Helper()
	ms, _ := r.summary["metrics"].(map[string]any)
	m, ok := ms[name].(map[string]any)
	if !ok {
		return 0
	}
	v, _ := m[field].(float64)
	return v
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
	cfg := Config{Script: path, Stdout: &stdout, Stderr: &stderr, Quiet: true, NoColor: true, SummaryExport: export}
	if mod != nil {
		mod(&cfg)
	}
	err := Run(context.Background(), cfg)
	res := runResult{err: err, stdout: stdout.String(), stderr: stderr.String()}
	if b, rerr := os.ReadFile(export); rerr == nil {
		require.NoError(t, json.Unmarshal(b, &res.summary))
	}
	return res
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
