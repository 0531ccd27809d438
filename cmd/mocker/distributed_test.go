package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	binDir = dir
	bin := filepath.Join(dir, "mocker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

// removeBinary deletes the binary once every test that runs it is done
// (TestMain), if one was built.
func removeBinary() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// binDir is where binary built mocker; empty until it has.
var binDir string

func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin, err := binary()
	require.NoError(t, err)
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
	assert.Equal(t, exitUsage, dispatch([]string{"worker", "--role", "cook", "--etcd", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"},
		&bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), `--role: "cook"; want prefill, decode or aggregated`)
	stderr.Reset()
	assert.Equal(t, exitUsage, dispatch([]string{"worker", "--role", "prefill", "--etcd", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1", "--max-rooms", "-1"},
		&bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "--max-rooms -1: want 0 (the default) or more")
}

// TestWorker_AFleetThatCannotStartExits1NamingTheWorker: --count workers
// that cannot reach etcd exit 1, and the message names the worker.
func TestWorker_AFleetThatCannotStartExits1NamingTheWorker(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := dispatch([]string{"worker", "--role", "decode", "--count", "3", "--name-prefix", "d",
		"--etcd", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"}, &bytes.Buffer{}, &stderr)
	assert.Equal(t, 1, code, stderr.String())
	assert.Regexp(t, `mocker worker: worker d-[0-2]: etcd http://127.0.0.1:1 unreachable.*other 2 workers were stopped`, stderr.String())
}

// TestWorker_FlagsThatMakeNoSenseAreRefusedByName: each is a usage error
// naming its flag, before the worker dials anything.
func TestWorker_FlagsThatMakeNoSenseAreRefusedByName(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(big, make([]byte, maxArgsFile+1), 0o600))
	base := []string{"worker", "--etcd", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"repeated role", []string{"--role", "prefill", "--role", "decode"}, `flag -role: given twice ("prefill", then "decode")`},
		{"block_size 0", []string{"--role", "decode", "--args", `{"block_size": 0}`}, "--args: block_size 0: a worker must state its block size"},
		{"negative drain timeout", []string{"--role", "decode", "--drain-timeout", "-1s"}, "--drain-timeout -1s: want 0 or more"},
		{"args file too large", []string{"--role", "decode", "--args", "@" + big}, "larger than 16 MiB"},
		{"bad etcd URL", []string{"--role", "decode", "--etcd", "::"}, "transport.etcd[0]"},
		{"count 0", []string{"--role", "decode", "--count", "0", "--name-prefix", "d"}, "--count 0: want 1 to 1024"},
		{"count too large", []string{"--role", "decode", "--count", "1025", "--name-prefix", "d"}, "--count 1025: want 1 to 1024"},
		{"count without a prefix", []string{"--role", "decode", "--count", "2"}, "--count 2: needs --name-prefix (or --name)"},
		{"name and prefix", []string{"--role", "decode", "--count", "2", "--name", "a", "--name-prefix", "b"}, `--name "a" and --name-prefix "b": give one`},
		{"count not a number", []string{"--role", "decode", "--count", "many"}, "-count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			assert.Equal(t, exitUsage, dispatch(append(append([]string{}, base...), tt.args...), &bytes.Buffer{}, &stderr))
			assert.Contains(t, stderr.String(), tt.want)
		})
	}
}

// TestRun_CoupledWorkersGiveTheInProcessFigures: scripts/cascade.js under
// --clock virtual, once on the in-process cluster and once on `mocker
// worker` processes whose clocks the cluster drives (transport {local,
// coupled}), exports the same metrics, every one, and the same KV
// handoff summary, transfer and request ids included: the processes and
// the wall time between them change no modeled figure.
func TestRun_CoupledWorkersGiveTheInProcessFigures(t *testing.T) {
	t.Parallel()
	type summary struct {
		Metrics map[string]any `json:"metrics"`
		Mocker  struct {
			Clusters map[string]map[string]any `json:"clusters"`
		} `json:"mocker"`
	}
	summaryOf := func(transport string) summary {
		export := filepath.Join(t.TempDir(), "summary.json")
		out, code := runBinary(t, "run", "-q", "--no-color", "--clock", "virtual", "-e", "TRANSPORT="+transport,
			"-e", "DURATION=4s", "--summary-export", export, filepath.Join("..", "..", "scripts", "cascade.js"))
		require.Equal(t, 0, code, out)
		raw, err := os.ReadFile(export)
		require.NoError(t, err)
		var sum summary
		require.NoError(t, json.Unmarshal(raw, &sum))
		return sum
	}
	want := summaryOf("")
	got := summaryOf("coupled")
	require.Contains(t, want.Metrics, "mocker_kv_aborts", "the run aborts holds")
	assert.Equal(t, want.Metrics, got.Metrics)
	// The KV handoff section too, its longest holds' transfer ids
	// included; only the transport's name differs.
	require.Contains(t, want.Mocker.Clusters, "cascade")
	assert.Equal(t, "in-process", want.Mocker.Clusters["cascade"]["transport"])
	assert.Equal(t, "local (coupled)", got.Mocker.Clusters["cascade"]["transport"])
	delete(want.Mocker.Clusters["cascade"], "transport")
	delete(got.Mocker.Clusters["cascade"], "transport")
	assert.Equal(t, want.Mocker, got.Mocker)
}

// TestRun_InterruptedCascadeCountsNoPhantomHolds: scripts/cascade.js
// stopped by SIGINT mid-run ends the requests that were holding KV; their
// holds end cancelled, and the teardown must not count them as open (nor
// fail the run as a leak) when every block is free.
func TestRun_InterruptedCascadeCountsNoPhantomHolds(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	require.NoError(t, err)
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "-q", "--no-color", "-e", "DURATION=120s", filepath.Join("..", "..", "scripts", "cascade.js"))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	// The run is well under way (decode saturated, holds piling up) long
	// before this; how long it has run does not change what is checked.
	time.Sleep(3 * time.Second)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out.String())
	assert.Equal(t, 105, exit.ExitCode(), "interrupted: %s", out.String())
	assert.Regexp(t, `after drain: held 0, reserved 0, active 0, open holds 0`, out.String())
	assert.NotContains(t, out.String(), "did not drain cleanly")
}
