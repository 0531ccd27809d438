package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binary builds mocker once for the tests that run it as a program: local
// mode spawns workers from os.Executable, which a test binary is not.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mocker-cmd-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mocker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin, err := binary()
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(bin)) })
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), 0
}

// TestRun_CascadeOnLocalTransport is the distributed path's acceptance:
// scripts/cascade.js with its workers as `mocker worker` processes over an
// embedded etcd and NATS passes its thresholds (holds, aborts, refusals,
// no leak after drain).
func TestRun_CascadeOnLocalTransport(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, "run", "-q", "--no-color", "-e", "TRANSPORT=local", "-e", "DURATION=4s",
		filepath.Join("..", "..", "scripts", "cascade.js"))
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `cluster "cascade": vllm, router round-robin, 2 prefill / 1 decode, transport local`)
	assert.Contains(t, out, "mocker_leaks\n    ✓ 'count==0' count=0")
}

func TestRun_UnreachableEtcdExits107NamingTheURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "attach.js")
	require.NoError(t, os.WriteFile(script, []byte(`import mocker from 'k6/x/mocker';
const c = mocker.cluster({ transport: { etcd: ['http://127.0.0.1:1'], nats: 'nats://127.0.0.1:1' } });
export default function () { c.generate({ prompt_tokens: 16 }); }
`), 0o600))
	out, code := runBinary(t, "run", "-q", script)
	assert.Equal(t, 107, code, out)
	assert.Contains(t, out, "etcd http://127.0.0.1:1 unreachable")
}

func TestWorker_RequiredFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	assert.Equal(t, exitUsage, dispatch([]string{"worker", "--role", "decode"}, &bytes.Buffer{}, &stderr))
	assert.True(t, strings.HasPrefix(stderr.String(), "mocker worker: --role, --etcd and --nats are required"), stderr.String())
	stderr.Reset()
	assert.Equal(t, 1, dispatch([]string{"worker", "--role", "cook", "--etcd", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"},
		&bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), `--role: "cook"; want prefill, decode or aggregated`)
}
