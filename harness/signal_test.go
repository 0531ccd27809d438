package harness

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signalRun is a mocker process whose stderr is watched line by line.
type signalRun struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string
	stderr strings.Builder // every line read so far
}

func startBinary(t *testing.T, args ...string) *signalRun {
	t.Helper()
	r := &signalRun{cmd: exec.Command(mockerBin, args...), lines: make(chan string, 1024)}
	r.cmd.Dir = "testdata"
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	r.cmd.Stdout = &r.stdout
	pipe, err := r.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, pipe)
	}()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// waitFor reads stderr until a line contains s. The deadline only guards
// against a hung process; nothing is measured.
func (r *signalRun) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the process ended before printing %q; stderr:\n%s", s, r.stderr.String())
			}
			r.stderr.WriteString(l + "\n")
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q on stderr; so far:\n%s", s, r.stderr.String())
		}
	}
}

// wait collects the rest of stderr and returns the exit code.
func (r *signalRun) wait(t *testing.T) int {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			if ok {
				r.stderr.WriteString(l + "\n")
				continue
			}
			err := r.cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			require.NoError(t, err)
			return 0
		case <-deadline:
			t.Fatalf("the process did not exit; stderr:\n%s", r.stderr.String())
		}
	}
}

func TestCLI_SignalStopsTheScenariosThenRunsTeardownAndTheSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGINT, "interrupt"}, {syscall.SIGTERM, "terminated"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startBinary(t, "run", "-q", "signal.js")
			r.waitFor(t, "SCENARIOS RUNNING")
			require.NoError(t, r.cmd.Process.Signal(tc.sig))
			code := r.wait(t)
			assert.Equal(t, ExitExternalAbort, code, r.stderr.String())
			assert.Contains(t, r.stderr.String(), "TEARDOWN END 1", "teardown is not cut short by the signal")
			assert.Contains(t, r.stderr.String(), "test run was aborted because mocker received a '"+tc.name+"' signal")
			assert.Contains(t, r.stdout.String(), "█ METRICS", "the summary is written")
		})
	}
}

func TestCLI_SecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"signal_stuck_teardown.js", "signal_stuck_summary.js"} {
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			r := startBinary(t, "run", "-q", script)
			r.waitFor(t, "STUCK")
			require.NoError(t, r.cmd.Process.Signal(syscall.SIGINT))
			r.waitFor(t, "stopping the test")
			require.NoError(t, r.cmd.Process.Signal(syscall.SIGINT))
			code := r.wait(t)
			assert.Equal(t, ExitExternalAbort, code, r.stderr.String())
			assert.Contains(t, r.stderr.String(), "second 'interrupt' signal")
		})
	}
}

func TestCLI_UnwritableOutputPathsFailBeforeTheTestRuns(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-dir", "out.json")
	for _, tc := range []struct {
		name string
		args []string
		flag string
	}{
		{"summary export", []string{"--summary-export", missing}, "--summary-export " + missing},
		{"json output", []string{"-o", "json=" + missing}, "--out json=" + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"run", "-q"}, tc.args...), "setup_logs.js")
			code, _, stderr := runBinary(t, nil, args...)
			assert.Equal(t, ExitInvalidConfig, code, stderr)
			assert.Contains(t, stderr, tc.flag)
			assert.NotContains(t, stderr, "SETUP RAN", "nothing of the test ran")
		})
	}
}

func TestCLI_SummaryExportCheckLeavesNoFileBehind(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "export.json")
	code, _, stderr := runBinary(t, nil, "run", "-q", "--summary-export", path, "init_exception.js")
	require.Equal(t, ExitScriptException, code, stderr)
	_, err := os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
