package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfig_SizesAndTimesBoundedBeforeWorkersStart feeds configs that
// would otherwise allocate more than the machine has or arm timers that
// overflow; each must be a config error naming its field, from Validate,
// before New builds a worker.
func TestConfig_SizesAndTimesBoundedBeforeWorkersStart(t *testing.T) {
	t.Parallel()
	disagg := func(prefillArgs, decodeArgs map[string]any) map[string]any {
		return map[string]any{"prefill": map[string]any{"args": prefillArgs}, "decode": map[string]any{"args": decodeArgs}}
	}
	tests := []struct {
		name string
		m    map[string]any
		want string
	}{
		{"workers beyond the cluster limit", map[string]any{"workers": 100000},
			"workers: want an integer in [1, 1024], got 100000"},
		{"pools beyond the cluster limit together", map[string]any{"prefill": map[string]any{"workers": 600}, "decode": map[string]any{"workers": 600}},
			"prefill.workers + decode.workers: want at most 1024 workers per cluster, got 600 + 600"},
		{"pool blocks beyond memory", map[string]any{"args": map[string]any{"num_gpu_blocks": 2e9}},
			"args.num_gpu_blocks: 2000000000 blocks × 2 workers (128 bytes a block) need about 476.8 GiB"},
		{"decode pool blocks beyond memory", disagg(nil, map[string]any{"num_gpu_blocks": 2e9}),
			"decode.args.num_gpu_blocks: 2000000000 blocks × 1 workers"},
		{"max_memory_mb lowers the limit", map[string]any{"max_memory_mb": 10, "workers": 2, "args": map[string]any{"num_gpu_blocks": 100000}},
			"args.num_gpu_blocks: 100000 blocks × 2 workers (128 bytes a block) need about 24 MiB for the KV pools of this cluster, over the limit of 10 MiB (max_memory_mb)"},
		{"ranks beyond the cluster limit", map[string]any{"workers": 2, "args": map[string]any{"dp_size": 600}},
			"args.dp_size: 2 workers × dp_size 600 ranks over the pools exceed 1024 ranks per cluster"},
		{"ranks of both pools beyond the cluster limit", disagg(map[string]any{"dp_size": 1023}, map[string]any{"dp_size": 2}),
			"decode.args.dp_size: 1 workers × dp_size 2 ranks over the pools exceed 1024 ranks per cluster"},
		{"dp_size huge", map[string]any{"args": map[string]any{"dp_size": 1e9}},
			"args.dp_size: 2 workers × dp_size 1000000000 ranks"},
		{"ranks beyond memory", map[string]any{"max_memory_mb": 10, "workers": 1, "args": map[string]any{"num_gpu_blocks": 20000, "dp_size": 8}},
			"args.num_gpu_blocks: 20000 blocks × 1 workers × dp_size 8 (128 bytes a block) need about 20 MiB"},
		{"transfer_max_conns not positive", map[string]any{"transfer_max_conns": 0},
			"transfer_max_conns: want an integer in [1, 65536], got 0"},
		{"transfer_max_conns huge", map[string]any{"transfer_max_conns": 1e6},
			"transfer_max_conns: want an integer in [1, 65536], got 1000000"},
		{"max_memory_mb not positive", map[string]any{"max_memory_mb": 0},
			"max_memory_mb: want an integer in [1, 2147483647], got 0"},
		{"speedup_ratio tiny", map[string]any{"args": map[string]any{"speedup_ratio": 1e-300}},
			"args.speedup_ratio: want a number in [0.001, 1000000], got 1e-300"},
		{"speedup_ratio huge", map[string]any{"args": map[string]any{"speedup_ratio": 1e308}},
			"args.speedup_ratio: want a number in [0.001, 1000000], got 1e+308"},
		{"pool speedup_ratio", disagg(nil, map[string]any{"speedup_ratio": 1e9}),
			"decode.args.speedup_ratio: want a number in [0.001, 1000000], got 1000000000"},
		{"decode_speedup_ratio tiny", map[string]any{"args": map[string]any{"decode_speedup_ratio": 1e-9}},
			"args.decode_speedup_ratio: want a number in [0.001, 1000000], got 1e-09"},
		{"abort timeout huge", map[string]any{"args": map[string]any{"kv_transfer_abort_timeout_ms": 1e12}},
			"args.kv_transfer_abort_timeout_ms: want an integer in [0, 1000000000], got 1000000000000"},
		{"session timeout huge", disagg(map[string]any{"handoff_session_timeout_ms": 1e15}, nil),
			"prefill.args.handoff_session_timeout_ms: want an integer in [1, 1000000000], got 1000000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := ConfigFromMap(tt.m)
			if err == nil {
				err = cfg.Validate()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestConfig_BoundsAcceptTheirEdges(t *testing.T) {
	t.Parallel()
	for _, m := range []map[string]any{
		{"workers": MaxWorkers, "args": map[string]any{"num_gpu_blocks": 16}},
		{"args": map[string]any{"speedup_ratio": MinSpeedupRatio, "kv_transfer_abort_timeout_ms": MaxTimeoutMs}},
		{"args": map[string]any{"speedup_ratio": MaxSpeedupRatio, "handoff_session_timeout_ms": MaxTimeoutMs}},
		{"args": map[string]any{"speedup_ratio": 0}},
		{"max_memory_mb": 1, "workers": 1, "args": map[string]any{"num_gpu_blocks": 8192}}, // exactly 1 MiB
	} {
		cfg, err := ConfigFromMap(m)
		require.NoError(t, err, "%v", m)
		require.NoError(t, cfg.Validate(), "%v", m)
	}
	require.NoError(t, Config{Workers: MaxWorkers, Args: map[string]any{"num_gpu_blocks": 16}}.Validate())
	// Pools that live in other processes on other hosts are not this
	// process's memory; ones it spawns itself are.
	far := Config{MaxMemoryMB: 1, Workers: 2, Args: map[string]any{"num_gpu_blocks": 100000},
		Transport: &TransportConfig{Etcd: []string{"http://127.0.0.1:2379"}, NATS: "nats://127.0.0.1:4222"}}
	require.NoError(t, far.Validate())
	far.Transport = &TransportConfig{Local: true}
	require.ErrorContains(t, far.Validate(), "over the limit of 1 MiB (max_memory_mb)")
	cfg, err := ConfigFromMap(map[string]any{"transfer_max_conns": 64})
	require.NoError(t, err)
	assert.Equal(t, 64, cfg.TransferMaxConns)
	require.ErrorContains(t, Config{TransferMaxConns: -1}.Validate(), "transfer_max_conns: want an integer in [1, 65536], got -1")
	require.ErrorContains(t, Config{Workers: MaxWorkers + 1}.Validate(), "workers: want an integer in [1, 1024], got 1025 (1024 is the limit of workers per cluster)")
}

func TestReadMemTotalMB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	tests := []struct {
		name string
		path string
		want float64
	}{
		{"meminfo", write("ok", "MemFree:  100 kB\nMemTotal:       16384000 kB\n"), 16000},
		{"no MemTotal", write("none", "MemFree: 1 kB\n"), 0},
		{"garbage", write("bad", "MemTotal: lots\n"), 0},
		{"missing file", filepath.Join(dir, "absent"), 0},
	}
	for _, tt := range tests {
		assert.InDelta(t, tt.want, readMemTotalMB(tt.path), 0, tt.name)
	}
	limit, why := defaultMemoryLimitMB()
	assert.Positive(t, limit)
	assert.NotEmpty(t, why)
}

func TestRequest_PromptBoundedBeforeAllocation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    Request
		want string
	}{
		{"prompt_tokens max int32", Request{PromptTokens: 2147483647}, "prompt_tokens: want an integer in [1, 4194304], got 2147483647"},
		{"prompt_tokens 1e8", Request{PromptTokens: 100_000_000}, "prompt_tokens: want an integer in [1, 4194304], got 100000000"},
		{"tokens too long", Request{Tokens: make([]uint32, MaxPromptTokens+1)}, "tokens: want at most 4194304 token ids, got 4194305"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.r
			require.EqualError(t, r.validate(), tt.want)
		})
	}
	ok := Request{PromptTokens: MaxPromptTokens}
	require.NoError(t, ok.validate())
}
