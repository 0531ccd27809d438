package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServe_BadFlagsAndConfigsNamed: `mocker serve` refuses bad flags
// (exit 2) and a config the cluster would refuse (exit 1), saying which
// and why, before it listens.
func TestServe_BadFlagsAndConfigsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("engine: vllm\nwokers: 2\n"), 0o600))
	list := filepath.Join(dir, "list.json")
	require.NoError(t, os.WriteFile(list, []byte(`[1, 2]`), 0o600))
	badArgs := filepath.Join(dir, "args.json")
	require.NoError(t, os.WriteFile(badArgs, []byte(`{"args": {"num_gpu_blocks": -5}}`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"serve", "--bogus"}, exitUsage, "mocker serve: flag provided but not defined: -bogus"},
		{"stray argument", []string{"serve", "extra"}, exitUsage, `mocker serve: unexpected argument "extra"`},
		{"log level", []string{"serve", "--log-level", "loud"}, exitUsage, "--log-level: want debug, info, warn or error"},
		{"missing config", []string{"serve", "--config", filepath.Join(dir, "none.json")}, 1, "mocker serve: --config: open"},
		{"unknown key", []string{"serve", "--config", bad}, 1, "bad.yaml: wokers: unknown key; valid keys:"},
		{"not an object", []string{"serve", "--config", list}, 1, "want a JSON or YAML object"},
		{"bad engine arg", []string{"serve", "--config", badArgs}, 1, "num_gpu_blocks"},
		{"bad listen", []string{"serve", "--listen", "127.0.0.1:99999"}, 1, "--listen 127.0.0.1:99999"},
		{"negative max-conns", []string{"serve", "--listen", "127.0.0.1:0", "--max-conns", "-1"}, 1, "max connections: want 0"},
		{"worker ports past 65535", []string{"serve", "--listen", "127.0.0.1:0", "--worker-ports", "65535"}, 1,
			"--worker-ports 65535: the 2 worker ranks need ports 65535 to 65536, within [1, 65535]"},
		{"bad kv events endpoint", []string{"serve", "--kv-events", "127.0.0.1:5557"}, 1, "kv events endpoint: want tcp://HOST:PORT"},
	} {
		var stderr bytes.Buffer
		assert.Equal(t, tc.code, dispatch(tc.args, &bytes.Buffer{}, &stderr), tc.name)
		assert.Contains(t, stderr.String(), tc.want, tc.name)
	}
}
