package cluster

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigFromMap_ScriptValues(t *testing.T) {
	cfg, err := ConfigFromMap(map[string]any{
		"name":           "x",
		"engine":         "vllm",
		"router":         "kv",
		"prefill":        map[string]any{"workers": int64(2), "args": map[string]any{"num_gpu_blocks": int64(512)}},
		"decode":         map[string]any{"workers": float64(3)},
		"args":           map[string]any{"speedup_ratio": float64(20)},
		"router_options": map[string]any{"busy_threshold": 0.9},
		"seed":           int64(7),
	})
	require.NoError(t, err)
	assert.True(t, cfg.Disagg, "prefill/decode given without disagg means disaggregated")
	assert.Equal(t, 2, cfg.Prefill.Workers)
	assert.Equal(t, 3, cfg.Decode.Workers)
	assert.Equal(t, uint64(7), cfg.Seed)
	assert.Equal(t, "kv", cfg.Router)

	agg, err := ConfigFromMap(map[string]any{"workers": int64(4)})
	require.NoError(t, err)
	assert.False(t, agg.Disagg)
	assert.Equal(t, 4, agg.Workers)

	explicit, err := ConfigFromMap(map[string]any{"disagg": false, "workers": 1})
	require.NoError(t, err)
	assert.False(t, explicit.Disagg)
}

func TestConfig_ErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name string
		m    map[string]any
		want string
	}{
		{"negative pool", map[string]any{"prefill": map[string]any{"workers": -1}}, "prefill.workers: want an integer in [1, 1024], got -1"},
		{"fractional workers", map[string]any{"workers": 1.5}, "workers: want an integer in [1, 1024], got number 1.5"},
		{"unknown key", map[string]any{"wokers": 2}, "wokers: unknown key"},
		{"unknown pool key", map[string]any{"decode": map[string]any{"size": 2}}, "decode.size: unknown key"},
		{"wrong type", map[string]any{"disagg": "yes"}, "disagg: want a boolean"},
		{"args not object", map[string]any{"args": 3}, "args: want an object, got number 3"},
		{"engine arg type", map[string]any{"args": map[string]any{"num_gpu_blocks": "x"}}, "args.num_gpu_blocks:"},
		{"pool arg range", map[string]any{"decode": map[string]any{"args": map[string]any{"max_num_seqs": 0}}}, "decode.args.max_num_seqs:"},
		{"pool arg unknown", map[string]any{"prefill": map[string]any{"args": map[string]any{"num_gpu_block": 4}}}, "prefill.args.num_gpu_block:"},
		{"cluster arg seen from pool", map[string]any{"disagg": true, "args": map[string]any{"block_size": -4}}, "args.block_size:"},
		{"block sizes differ", map[string]any{"prefill": map[string]any{"args": map[string]any{"block_size": 32}}}, "prefill.args.block_size: 32 differs from decode.args.block_size 16"},
		{"speedups differ", map[string]any{"decode": map[string]any{"args": map[string]any{"speedup_ratio": 5}}}, "decode.args.speedup_ratio"},
		{"engine", map[string]any{"engine": "tgi"}, "engine: \"tgi\" is not modeled"},
		{"engine type contradiction", map[string]any{"args": map[string]any{"engine_type": "sglang"}}, "args.engine_type"},
		{"pool engine type contradiction", map[string]any{"decode": map[string]any{"args": map[string]any{"engine_type": "sglang"}}}, "decode.args.engine_type"},
		{"router mode", map[string]any{"router": "fastest"}, "router: router mode \"fastest\" is not valid"},
		{"busy threshold range", map[string]any{"router_options": map[string]any{"busy_threshold": 1.5}}, "router_options.busy_threshold: want a number in (0, 1], got 1.5"},
		{"both thresholds", map[string]any{"router_options": map[string]any{"busy_threshold": 0.5, "active_decode_blocks_threshold": 0.5}}, "router_options.busy_threshold: give busy_threshold"},
		{"router option unknown", map[string]any{"router_options": map[string]any{"temperature": 1}}, "router_options.temperature: unknown key"},
		{"router option range", map[string]any{"router_options": map[string]any{"router_ttl_secs": 0}}, "router_options: router config: router_ttl_secs"},
		{"prefill token fraction range", map[string]any{"router_options": map[string]any{"active_prefill_tokens_threshold_frac": 0}}, "router_options.active_prefill_tokens_threshold_frac: want a number > 0, got 0"},
		{"request ttl range", map[string]any{"router_options": map[string]any{"router_request_ttl_secs": -1}}, "router_options.router_request_ttl_secs: want a number ≥ 0, got -1"},
		{"transport", map[string]any{"transport": map[string]any{"etcd": []any{"http://127.0.0.1:2379"}, "nats": "nats://127.0.0.1:4222"}}, "transport: no distributed transport is linked"},
		{"transport local string", map[string]any{"transport": "remote"}, "transport: want 'local' or {etcd"},
		{"transport namespace", map[string]any{"transport": map[string]any{"etcd": []any{"http://127.0.0.1:2379"}, "nats": "nats://127.0.0.1:4222", "namespace": "a.b"}}, "transport.namespace: \"a.b\": use letters"},
		{"transfer host needs an advertised host", map[string]any{"disagg": true, "prefill": map[string]any{"workers": 2}, "transfer_host": "0.0.0.0"}, "transfer server of prefill-0"},
		{"transport field", map[string]any{"transport": map[string]any{"etcd": 5}}, "transport.etcd: want a list of endpoint URLs, got number 5"},
		{"NaN in args", map[string]any{"args": map[string]any{"speedup_ratio": math.NaN()}}, "args.speedup_ratio: want a finite number, got NaN"},
		{"Infinity in pool args", map[string]any{"decode": map[string]any{"args": map[string]any{"num_gpu_blocks": math.Inf(1)}}}, "decode.args.num_gpu_blocks: want a finite number, got +Inf"},
		{"NaN nested in sglang", map[string]any{"engine": "sglang", "args": map[string]any{"sglang": map[string]any{"schedule_conservativeness": math.NaN()}}}, "args.sglang.schedule_conservativeness: want a finite number"},
		{"NaN in router options", map[string]any{"router_options": map[string]any{"router_temperature": math.Inf(-1)}}, "router_options.router_temperature: want a finite number"},
		{"blocks beyond int32", map[string]any{"args": map[string]any{"num_gpu_blocks": 1e12}}, "args.num_gpu_blocks: must be between 1 and 2147483647, got 1000000000000"},
		{"worker type in aggregated args", map[string]any{"args": map[string]any{"worker_type": "decode"}}, `args.worker_type: "decode" conflicts with the aggregated workers`},
		{"worker type in pool args", map[string]any{"prefill": map[string]any{"args": map[string]any{"worker_type": "decode"}}}, `prefill.args.worker_type: "decode" conflicts with the prefill pool`},
		{"worker type in cluster args of a disagg cluster", map[string]any{"disagg": true, "args": map[string]any{"worker_type": "prefill"}}, `args.worker_type: "prefill" conflicts with the decode pool`},
		{"engine type in pool args", map[string]any{"engine": "sglang", "decode": map[string]any{"args": map[string]any{"engine_type": "vllm"}}}, `decode.args.engine_type: "vllm" conflicts with engine "sglang"`},
		{"sglang args with vllm", map[string]any{"args": map[string]any{"sglang": map[string]any{"optimistic_prefill": true}}}, `args.sglang: applies only to engine "sglang", and this cluster's engine is "vllm"`},
		{"sglang pool args with vllm", map[string]any{"decode": map[string]any{"args": map[string]any{"sglang": map[string]any{"page_size": 16}}}}, `decode.args.sglang: applies only to engine "sglang"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ConfigFromMap(tc.m)
			if err == nil {
				var c *Cluster
				c, err = New(cfg)
				if c != nil {
					require.NoError(t, c.Close())
				}
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNew_GoConfigErrors(t *testing.T) {
	_, err := New(Config{Prefill: PoolConfig{Workers: 2}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disagg:")
	_, err = New(Config{Disagg: true, Decode: PoolConfig{Workers: -2}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "decode.workers: want an integer in [1, 1024], got -2")
	_, err = New(Config{Transport: &TransportConfig{NATS: "nats://x"}})
	require.ErrorContains(t, err, "transport.etcd: want at least one endpoint URL")
}

func TestNew_DisaggDefaultsAndArgLayers(t *testing.T) {
	c := start(t, Config{
		Disagg:  true,
		Args:    map[string]any{"num_gpu_blocks": 300},
		Decode:  PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 200}},
		Prefill: PoolConfig{},
	})
	s := drainAndCheck(t, c)
	require.Len(t, s.Workers, 3)
	assert.Equal(t, []string{"prefill-0", "decode-0", "decode-1"}, []string{s.Workers[0].Name, s.Workers[1].Name, s.Workers[2].Name})
	assert.Equal(t, 300, s.Workers[0].TotalBlocks, "cluster args over the defaults")
	assert.Equal(t, 200, s.Workers[1].TotalBlocks, "pool args over cluster args")
	assert.NotEmpty(t, s.Workers[0].TransferAddr)
	assert.Empty(t, s.Workers[1].TransferAddr)
}

func TestConfig_RoleAndEngineMatchingThePoolAreAccepted(t *testing.T) {
	for _, m := range []map[string]any{
		{"prefill": map[string]any{"args": map[string]any{"worker_type": "prefill"}}, "decode": map[string]any{"args": map[string]any{"worker_type": "Decode"}}},
		{"args": map[string]any{"worker_type": "aggregated", "engine_type": "vllm"}},
		{"engine": "sglang", "args": map[string]any{"sglang": map[string]any{"optimistic_prefill": true}}},
	} {
		cfg, err := ConfigFromMap(m)
		require.NoError(t, err)
		assert.NoError(t, cfg.Validate(), "%v", m)
	}
}

func TestConfig_DiffNamesTheFirstDifferingKey(t *testing.T) {
	base := Config{Name: "a", Disagg: true, Seed: 1, Decode: PoolConfig{Workers: 2, Args: map[string]any{"max_num_seqs": int64(8)}}}
	cases := []struct {
		name string
		o    Config
		want string
	}{
		{"same", base, ""},
		{"seed", Config{Name: "a", Disagg: true, Seed: 2, Decode: base.Decode}, "seed 1 vs 2"},
		{"pool arg", Config{Name: "a", Disagg: true, Seed: 1, Decode: PoolConfig{Workers: 2, Args: map[string]any{"max_num_seqs": 16}}}, "decode.args.max_num_seqs 8 vs 16"},
		{"pool arg missing", Config{Name: "a", Disagg: true, Seed: 1, Decode: PoolConfig{Workers: 2}}, "decode.args.max_num_seqs 8 vs (not set)"},
		{"string", Config{Name: "a", Disagg: true, Seed: 1, Decode: base.Decode, Router: "kv"}, `router "" vs "kv"`},
		{"same value as a float", Config{Name: "a", Disagg: true, Seed: 1, Decode: PoolConfig{Workers: 2, Args: map[string]any{"max_num_seqs": 8.0}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, base.Diff(tc.o))
		})
	}
	assert.Empty(t, Config{Args: map[string]any{}}.Diff(Config{}), "empty args and no args configure the same cluster")
}

func TestPlan_Scale(t *testing.T) {
	cases := []struct {
		cfg  Config
		want float64
	}{
		{Config{}, DefaultSpeedupRatio},
		{Config{Args: map[string]any{"speedup_ratio": 40}}, 40},
		{Config{Disagg: true, Prefill: PoolConfig{Args: map[string]any{"speedup_ratio": 5}}, Decode: PoolConfig{Args: map[string]any{"speedup_ratio": 5}}}, 5},
		{Config{Args: map[string]any{"speedup_ratio": 0}}, 1},
	}
	for _, tc := range cases {
		p, err := tc.cfg.Plan()
		require.NoError(t, err)
		assert.InDelta(t, tc.want, p.Scale().Ratio(), 1e-12, "%+v", tc.cfg.Args)
	}
	_, err := Config{Args: map[string]any{"speedup_ratio": -1}}.Plan()
	assert.ErrorContains(t, err, "args.speedup_ratio")
}
