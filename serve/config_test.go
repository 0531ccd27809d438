package serve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// TestLoadConfig_JSONAndYAMLReadAlike: the same config as JSON and YAML
// gives the same cluster config, and that is what cluster.ConfigFromMap
// makes of the object.
func TestLoadConfig_JSONAndYAMLReadAlike(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js := `{"engine": "vllm", "router": "kv", "prefill": {"workers": 2, "args": {"num_gpu_blocks": 512}},
	        "decode": {"workers": 1, "args": {"max_num_seqs": 8}}, "args": {"speedup_ratio": 20, "kv_transfer_abort_timeout_ms": 2000}}`
	ym := `engine: vllm
router: kv
prefill:
  workers: 2
  args: {num_gpu_blocks: 512}
decode:
  workers: 1
  args:
    max_num_seqs: 8
args:
  speedup_ratio: 20
  kv_transfer_abort_timeout_ms: 2000
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.json"), []byte(js), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(ym), 0o600))
	a, err := LoadConfig(filepath.Join(dir, "c.json"))
	require.NoError(t, err)
	b, err := LoadConfig(filepath.Join(dir, "c.yaml"))
	require.NoError(t, err)
	assert.Empty(t, a.Diff(b))
	assert.True(t, a.Disagg, "prefill given: disaggregated, as in a script")
	assert.Equal(t, 2, a.Prefill.Workers)
	s, err := a.SpeedupRatio()
	require.NoError(t, err)
	assert.Equal(t, 20.0, s)
}

func TestParseConfig_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc string
		yaml      bool
		want      string
	}{
		{"unknown key", `{"wokers": 2}`, false, "wokers: unknown key; valid keys:"},
		{"wrong type", `{"prefill": {"workers": -1}}`, false, "prefill.workers"},
		{"not an object", `[1]`, false, "want one JSON object"},
		{"two objects", `{} {}`, false, "found more"},
		{"bad YAML", "engine: [", true, "YAML"},
	} {
		_, err := ParseConfig([]byte(tc.doc), tc.yaml)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	cfg, err := ParseConfig(nil, true)
	require.NoError(t, err)
	assert.Empty(t, cfg.Diff(cluster.Config{}), "an empty file is the zero config")
}
