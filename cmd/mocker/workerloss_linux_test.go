package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun_CascadeFailsWhenItsDecodeWorkerIsKilled: scripts/cascade.js on
// the local transport, its only decode worker process killed (SIGKILL)
// once requests flow, exits 99 naming the threshold on errored requests.
// The holds, aborts and refusals its other thresholds ask for have
// happened by then, so without that threshold the run passed on a dead
// cluster.
func TestRun_CascadeFailsWhenItsDecodeWorkerIsKilled(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	require.NoError(t, err)
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "-q", "--no-color", "-e", "TRANSPORT=local", "-e", "DURATION=6s",
		filepath.Join("..", "..", "scripts", "cascade.js"))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	decode, err := childWorker(ctx, cmd.Process.Pid, "decode-0")
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		require.NoError(t, err, "output so far:\n%s", out.String())
	}
	// Let the cascade build up first: the scenario runs 6 s of wall time.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	require.NoError(t, syscall.Kill(decode, syscall.SIGKILL))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the run passed:\n%s", out.String())
	assert.Equal(t, 99, exit.ExitCode(), out.String())
	assert.Contains(t, out.String(), "thresholds on metrics 'mocker_requests{outcome:error}")
	assert.Regexp(t, `\{outcome:error\}\n +✗ 'count==0' count=[1-9]`, out.String())
	assert.Contains(t, out.String(), "transport local")
}

// childWorker waits for the `mocker worker --name name` process that pid
// spawned and returns its pid.
func childWorker(ctx context.Context, pid int, name string) (int, error) {
	for {
		if child, ok := findChild(pid, "--name\x00"+name+"\x00"); ok {
			return child, nil
		}
		select {
		case <-ctx.Done():
			return 0, errors.New("no worker " + name + " started")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// findChild looks through /proc for a child of pid whose command line
// contains arg (NUL-separated, as /proc keeps it).
func findChild(pid int, arg string) (int, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || !strings.Contains(string(status), "\nPPid:\t"+strconv.Itoa(pid)+"\n") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), arg) {
			return child, true
		}
	}
	return 0, false
}
