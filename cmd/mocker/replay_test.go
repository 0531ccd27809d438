package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const replayConfigYAML = `disagg: true
router: kv
seed: 1
args: {num_gpu_blocks: 4096, max_num_seqs: 64, kv_transfer_abort_timeout_ms: 2000, kv_bytes_per_token: 131072, kv_transfer_bandwidth: 25}
prefill: {workers: 2}
decode: {workers: 2}
`

func TestReplayCmd_SameInputsGiveByteIdenticalOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(replayConfigYAML), 0o644))
	var outs [2][]byte
	for i := range outs {
		js, html := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.html")
		var stdout, stderr bytes.Buffer
		code := dispatch([]string{"replay", "--trace", "../../replay/testdata/sessions.jsonl.gz", "--config", cfg,
			"--slo", "ttft=50,e2e=400", "--json", js, "--report", html}, &stdout, &stderr)
		require.Equal(t, 0, code, stderr.String())
		b, err := os.ReadFile(js)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"prefix_cache_hit_rate"`)
		assert.Contains(t, stdout.String(), "Time to first token")
		page, err := os.ReadFile(html)
		require.NoError(t, err)
		assert.Contains(t, string(page), "<svg")
		outs[i] = append(stdout.Bytes(), b...)
	}
	assert.Equal(t, string(outs[0]), string(outs[1]))
}

func TestReplayCmd_ErrorsNameWhatToFix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"prefill": {"workers": -1}}`), 0o644))
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"workers": 1}`), 0o644))
	trace := filepath.Join(dir, "t.csv")
	require.NoError(t, os.WriteFile(trace, []byte("timestamp,input_length,output_length\n0,10,2\n"), 0o644))
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--trace", trace}, "--trace and --config are required", exitUsage},
		{[]string{"--trace", trace, "--config", cfg}, "prefill.workers", 1},
		{[]string{"--trace", filepath.Join(dir, "none"), "--config", good}, "--trace", 1},
		{[]string{"--trace", trace, "--config", good, "--slo", "ttft=fast"}, "--slo", 1},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(append([]string{"replay"}, tc.args...), &stdout, &stderr)
		assert.Equal(t, tc.code, code, tc.args)
		assert.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

func TestSweepCmd_SameCSVOnOneOrTwoCores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(replayConfigYAML), 0o644))
	var csvs [2]string
	for i, parallel := range []string{"1", "2"} {
		var stdout, stderr bytes.Buffer
		js, html := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.html")
		code := dispatch([]string{"sweep", "--trace", "../../replay/testdata/shared.jsonl", "--config", cfg,
			"--grid", "prefill.workers=1..2,router=kv|round-robin", "--parallel", parallel, "--json", js, "--html", html}, &stdout, &stderr)
		require.Equal(t, 0, code, stderr.String())
		csvs[i] = stdout.String()
		b, err := os.ReadFile(js)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"goodput_per_gpu"`)
		page, err := os.ReadFile(html)
		require.NoError(t, err)
		assert.Contains(t, string(page), "prefill.workers=2 router=round-robin")
	}
	assert.Equal(t, csvs[0], csvs[1])
	assert.Equal(t, 5, bytes.Count([]byte(csvs[0]), []byte("\n")), "a header and one row per combination")
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, dispatch([]string{"sweep", "--trace", "x", "--config", cfg}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "--grid is required")
}
