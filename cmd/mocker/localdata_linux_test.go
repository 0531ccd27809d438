package main

import (
	"bytes"
	"context"
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

// TestRun_KilledLocalRunLeavesNoEtcdData: `mocker run` with the local
// transport killed with SIGKILL (no time to clean up) leaves no embedded
// etcd data behind: its reaper removes the directory once the run is
// gone, and its workers go with it.
func TestRun_KilledLocalRunLeavesNoEtcdData(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	require.NoError(t, err)
	tmp := t.TempDir()
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "-q", "--no-color", "-e", "TRANSPORT=local", "-e", "DURATION=120s",
		filepath.Join("..", "..", "scripts", "cascade.js"))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
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
	// Requests flow and etcd has written its data.
	time.Sleep(2 * time.Second)
	data := etcdData(t, tmp)
	require.Len(t, data, 1, "the run's etcd data directory in %s", tmp)
	// Were the reaper killed too (a SIGKILL to the whole process group),
	// what is left is bounded, and the next local run removes it.
	size := dirBytes(t, data[0])
	t.Logf("etcd data before the kill: %d bytes", size)
	assert.LessOrEqual(t, size, int64(16<<20), "the etcd data of a run is a few MB")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	assert.Eventually(t, func() bool { return syscall.Kill(decode, 0) == syscall.ESRCH }, 10*time.Second, 20*time.Millisecond,
		"the decode worker died with the run")
	assert.Eventually(t, func() bool { return len(etcdData(t, tmp)) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the etcd data is removed once the run is killed")
	if left := etcdData(t, tmp); len(left) > 0 {
		t.Logf("left: %s, %d bytes", left[0], dirBytes(t, left[0]))
	}
}

// etcdData lists local mode's etcd data directories in dir.
func etcdData(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "mocker-etcd-") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// dirBytes is the disk space the files under dir take.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
