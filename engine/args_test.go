package engine

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func argsIntP(n int) *int           { return &n }
func argsInt64P(n int64) *int64     { return &n }
func argsFloatP(f float64) *float64 { return &f }
func argsParse(t *testing.T, s string) Args {
	t.Helper()
	a, err := ParseArgs([]byte(s))
	require.NoError(t, err, "input %s", s)
	return a
}

// The expected values are Dynamo's MockEngineArgs defaults, written out by
// hand from its documentation rather than read from DefaultArgs.
func TestArgs_DefaultsMatchDynamo(t *testing.T) {
	t.Parallel()
	want := Args{
		EngineType:              "vllm",
		NumGPUBlocks:            16384,
		BlockSize:               64,
		MaxNumSeqs:              argsIntP(256),
		MaxNumBatchedTokens:     argsIntP(8192),
		EnablePrefixCaching:     true,
		EnableChunkedPrefill:    true,
		SpeedupRatio:            1,
		DecodeSpeedupRatio:      1,
		DPSize:                  1,
		WorkerType:              "aggregated",
		PreemptionMode:          "lifo",
		KVTransferTimingMode:    "full_prompt",
		HandoffSessionTimeoutMs: 300000,
	}
	assert.Equal(t, want, DefaultArgs())
	for _, in := range []string{"", "  \n", "{}"} {
		assert.Equal(t, want, argsParse(t, in), "input %q", in)
	}
	require.NoError(t, DefaultArgs().Validate())
}

func TestArgs_SGLangDefaultsMatchDynamo(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{"engine_type":"sglang"}`)
	assert.Equal(t, 1, a.BlockSize)
	require.NotNil(t, a.SGLang)
	assert.Equal(t, SGLangArgs{
		SchedulePolicy:           "fifo",
		PageSize:                 1,
		MaxPrefillTokens:         16384,
		ChunkedPrefillSize:       8192,
		ClipMaxNewTokens:         4096,
		ScheduleConservativeness: 1,
	}, *a.SGLang)
	assert.False(t, a.SGLang.OptimisticPrefill)
	assert.Nil(t, a.SGLang.MaxRunningRequests)
}

func TestParseArgs_BlockSizeResolution(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		in        string
		wantBlock int
		wantPage  int // 0: no sglang object expected
		wantChunk int
	}{
		{"vllm absent", `{}`, 64, 0, 0},
		{"vllm zero", `{"block_size":0}`, 64, 0, 0},
		{"vllm null", `{"block_size":null}`, 64, 0, 0},
		{"vllm explicit", `{"block_size":16}`, 16, 0, 0},
		{"sglang absent", `{"engine_type":"sglang"}`, 1, 1, 8192},
		{"sglang from page size", `{"engine_type":"sglang","sglang":{"page_size":32}}`, 32, 32, 8192},
		{"sglang page from block", `{"engine_type":"sglang","block_size":16}`, 16, 16, 8192},
		{"sglang both equal", `{"engine_type":"sglang","block_size":16,"sglang":{"page_size":16}}`, 16, 16, 8192},
		// 8192 = 2730*3 + 2, so the default chunk rounds down to 8190.
		{"sglang default chunk rounds to page", `{"engine_type":"sglang","block_size":3}`, 3, 3, 8190},
		{"sglang page above default chunk", `{"engine_type":"sglang","block_size":10000}`, 10000, 10000, 10000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := argsParse(t, c.in)
			assert.Equal(t, c.wantBlock, a.BlockSize)
			if c.wantPage == 0 {
				assert.Nil(t, a.SGLang)
				return
			}
			require.NotNil(t, a.SGLang)
			assert.Equal(t, c.wantPage, a.SGLang.PageSize)
			assert.Equal(t, c.wantChunk, a.SGLang.ChunkedPrefillSize)
		})
	}
}

func TestParseArgs_InvalidNamesField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		in        string
		field     string
		mentioned []string // substrings the message must contain
	}{
		{"unknown key", `{"num_gpu_block":5}`, "num_gpu_block", []string{"unknown key", `did you mean "num_gpu_blocks"`, "num_gpu_blocks, ", "router_load_includes_held"}},
		{"removed watermark", `{"watermark":0.01}`, "watermark", []string{"unknown key"}},
		{"unknown sglang key", `{"engine_type":"sglang","sglang":{"page":4}}`, "sglang.page", []string{"valid keys in sglang", "optimistic_prefill", "page_size"}},
		{"unknown sglang key under vllm", `{"sglang":{"bogus":1}}`, "sglang.bogus", []string{"unknown key"}},
		{"string for int", `{"num_gpu_blocks":"x"}`, "num_gpu_blocks", []string{`want a positive integer, got string "x"`}},
		{"fraction for int", `{"max_num_seqs":1.5}`, "max_num_seqs", []string{"want a positive integer, got number 1.5"}},
		{"huge int", `{"num_gpu_blocks":1e30}`, "num_gpu_blocks", []string{"want a positive integer"}},
		{"bool for number", `{"speedup_ratio":true}`, "speedup_ratio", []string{"want a non-negative number, got boolean true"}},
		{"number for bool", `{"enable_prefix_caching":1}`, "enable_prefix_caching", []string{"want a boolean, got number 1"}},
		{"array for string", `{"planner_profile_data":[1]}`, "planner_profile_data", []string{"got an array"}},
		{"number for sglang object", `{"sglang":3}`, "sglang", []string{"want an object"}},
		{"bad engine", `{"engine_type":"tgi"}`, "engine_type", []string{`"vllm"`, `"sglang"`, `got string "tgi"`}},
		{"trtllm static batch", `{"engine_type":"TRTLLM","trtllm":{"capacity_scheduler_policy":"STATIC_BATCH"}}`, "trtllm.capacity_scheduler_policy", []string{"not modeled", `"max_utilization"`}},
		{"bad trtllm policy", `{"engine_type":"trtllm","trtllm":{"capacity_scheduler_policy":"greedy"}}`, "trtllm.capacity_scheduler_policy", []string{`"guaranteed_no_evict"`, `got string "greedy"`}},
		{"unknown trtllm key under vllm", `{"trtllm":{"capacity_policy":"max_utilization"}}`, "trtllm.capacity_policy", []string{"unknown key", "capacity_scheduler_policy"}},
		{"number for trtllm object", `{"trtllm":3}`, "trtllm", []string{"want an object"}},
		{"trtllm block size 1", `{"engine_type":"trtllm","block_size":1}`, "block_size", []string{"at least 2", `"trtllm"`}},
		{"bad worker", `{"worker_type":"both"}`, "worker_type", []string{`"aggregated"`}},
		{"bad preemption", `{"preemption_mode":"random"}`, "preemption_mode", []string{`"lifo"`, `"fifo"`}},
		{"bad timing mode", `{"kv_transfer_timing_mode":"partial"}`, "kv_transfer_timing_mode", []string{`"destination_missing"`}},
		{"bad schedule policy", `{"engine_type":"sglang","sglang":{"schedule_policy":"random"}}`, "sglang.schedule_policy", []string{`"lpm"`}},
		{"zero blocks", `{"num_gpu_blocks":0}`, "num_gpu_blocks", []string{"at least 1", "got 0"}},
		{"negative blocks", `{"num_gpu_blocks":-4}`, "num_gpu_blocks", []string{"at least 1", "got -4"}},
		{"blocks beyond int32", `{"num_gpu_blocks":1000000000000}`, "num_gpu_blocks", []string{"between 1 and 2147483647", "got 1000000000000"}},
		{"negative block size", `{"block_size":-1}`, "block_size", []string{"at least 1", "got -1"}},
		{"zero seqs", `{"max_num_seqs":0}`, "max_num_seqs", []string{"at least 1", "null means unbounded"}},
		{"zero batched", `{"max_num_batched_tokens":0}`, "max_num_batched_tokens", []string{"at least 1"}},
		{"zero model len", `{"max_model_len":0}`, "max_model_len", []string{"at least 1"}},
		{"model len with sglang", `{"engine_type":"sglang","max_model_len":4096}`, "max_model_len", []string{"only with engine_type \"vllm\""}},
		{"negative speedup", `{"speedup_ratio":-1}`, "speedup_ratio", []string{"≥ 0"}},
		{"negative decode speedup", `{"decode_speedup_ratio":-1}`, "decode_speedup_ratio", []string{"≥ 0", "as in Dynamo"}},
		{"vllm block size one", `{"block_size":1}`, "block_size", []string{"at least 2", "as in Dynamo"}},
		{"conservativeness above one", `{"engine_type":"sglang","sglang":{"schedule_conservativeness":1.3}}`, "sglang.schedule_conservativeness", []string{"between 0 and 1", "1.3"}},
		{"fixed timing without decode", `{"timing_model":{"type":"fixed","prefill_ms":2}}`, "timing_model.decode_ms", []string{"fixed model"}},
		{"timing model unknown key", `{"timing_model":{"type":"fixed","prefill":2}}`, "timing_model.prefill", []string{"prefill_ms"}},
		{"timing model unknown type", `{"timing_model":"aic"}`, "timing_model", []string{`"fixed"`}},
		{"interpolated without profile", `{"timing_model":"interpolated"}`, "timing_model", []string{"planner_profile_data"}},
		{"fixed with profile", `{"timing_model":{"type":"fixed","prefill_ms":1,"decode_ms":1},"planner_profile_data":"p.json"}`, "timing_model", []string{"contradicts planner_profile_data"}},
		{"kv bytes spellings disagree", `{"kv_bytes_per_token":10,"kv_cache_bytes_per_token":20}`, "kv_cache_bytes_per_token", []string{"contradicts kv_bytes_per_token 10"}},
		{"zero dp", `{"dp_size":0}`, "dp_size", []string{"at least 1"}},
		{"negative kv bytes", `{"kv_bytes_per_token":-1}`, "kv_bytes_per_token", []string{"≥ 0"}},
		{"negative bandwidth", `{"kv_transfer_bandwidth":-0.5}`, "kv_transfer_bandwidth", []string{"GB/s", "≥ 0"}},
		{"negative abort timeout", `{"kv_transfer_abort_timeout_ms":-1}`, "kv_transfer_abort_timeout_ms", []string{"≥ 0"}},
		{"zero session timeout", `{"handoff_session_timeout_ms":0}`, "handoff_session_timeout_ms", []string{"at least 1"}},
		{"page size mismatch", `{"engine_type":"sglang","block_size":16,"sglang":{"page_size":32}}`, "sglang.page_size", []string{"must equal block_size (16)", "got 32"}},
		{"chunk not multiple", `{"engine_type":"sglang","block_size":16,"sglang":{"chunked_prefill_size":100}}`, "sglang.chunked_prefill_size", []string{"multiple of block_size (16)", "got 100"}},
		{"negative conservativeness", `{"engine_type":"sglang","sglang":{"schedule_conservativeness":-0.5}}`, "sglang.schedule_conservativeness", []string{"between 0 and 1", "-0.5"}},
		{"zero page size", `{"engine_type":"sglang","sglang":{"page_size":0}}`, "sglang.page_size", []string{"at least 1"}},
		{"zero running requests", `{"engine_type":"sglang","sglang":{"max_running_requests":0}}`, "sglang.max_running_requests", []string{"at least 1"}},
		{"string optimistic", `{"engine_type":"sglang","sglang":{"optimistic_prefill":"yes"}}`, "sglang.optimistic_prefill", []string{"want a boolean"}},
		{"both legacy flags", `{"is_prefill":true,"is_decode":true}`, "is_prefill", []string{"cannot both be true"}},
		{"legacy contradicts worker type", `{"worker_type":"decode","is_prefill":true}`, "is_prefill", []string{`contradicts worker_type "decode"`}},
		{"aic backend", `{"aic_backend":"vllm"}`, "aic_backend", []string{"not modeled", "planner_profile_data"}},
		{"aic nextn", `{"aic_nextn":3}`, "aic_nextn", []string{"decode_speedup_ratio"}},
		{"g3 offload", `{"num_g3_blocks":100}`, "num_g3_blocks", []string{"G3", "num_g2_blocks"}},
		{"g4 offload", `{"enable_g4_storage":true}`, "enable_g4_storage", []string{"G4", "num_g2_blocks"}},
		{"g2 offload on sglang", `{"engine_type":"sglang","num_g2_blocks":100}`, "num_g2_blocks", []string{"vllm and trtllm"}},
		{"negative g2 blocks", `{"num_g2_blocks":-1}`, "num_g2_blocks", []string{"-1"}},
		{"g2 offload without a prefix cache", `{"num_g2_blocks":100,"enable_prefix_caching":false}`, "num_g2_blocks", []string{"enable_prefix_caching"}},
		{"negative g2 bandwidth", `{"bandwidth_g2_to_g1_gbps":-1}`, "bandwidth_g2_to_g1_gbps", []string{"-1"}},
		{"ignored key wrong type", `{"bootstrap_port":"x"}`, "bootstrap_port", []string{"want an integer in [0, 65535]"}},
		{"ignored port out of range", `{"zmq_kv_events_port":70000}`, "zmq_kv_events_port", []string{"got 70000"}},
		{"ignored fraction out of range", `{"gpu_memory_utilization":1.5}`, "gpu_memory_utilization", []string{"[0, 1]"}},
		{"ignored g1 backend enum", `{"g1_backend":"other"}`, "g1_backend", []string{`"kvbm"`}},
		{"ignored object wrong type", `{"reasoning":"on"}`, "reasoning", []string{"want an object"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseArgs([]byte(c.in))
			require.Error(t, err)
			var ae *ArgError
			require.True(t, errors.As(err, &ae), "want *ArgError, got %T: %v", err, err)
			assert.Equal(t, c.field, ae.Field, "error: %v", err)
			assert.True(t, strings.HasPrefix(err.Error(), c.field+": "), "error %q should start with the field", err)
			for _, m := range c.mentioned {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

func TestParseArgs_MalformedJSON(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"num_gpu_blocks":}`, `[1,2]`, `{"a":1} {"b":2}`, `"vllm"`} {
		_, err := ParseArgs([]byte(in))
		require.Error(t, err, "input %s", in)
		assert.Contains(t, err.Error(), "engine args")
	}
}

func TestParseArgs_EnumsCaseInsensitive(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{"engine_type":"SGLang","worker_type":"Prefill","preemption_mode":"FIFO",
		"kv_transfer_timing_mode":"Destination_Missing","sglang":{"schedule_policy":"LPM"}}`)
	assert.Equal(t, EngineSGLang, a.EngineType)
	assert.Equal(t, WorkerPrefill, a.WorkerType)
	assert.Equal(t, PreemptFIFO, a.PreemptionMode)
	assert.Equal(t, TransferDestinationMissing, a.KVTransferTimingMode)
	assert.Equal(t, SGLangPolicyLPM, a.SGLang.SchedulePolicy)

	out, err := json.Marshal(a)
	require.NoError(t, err)
	for _, s := range []string{`"engine_type":"sglang"`, `"worker_type":"prefill"`, `"preemption_mode":"fifo"`, `"kv_transfer_timing_mode":"destination_missing"`, `"schedule_policy":"lpm"`} {
		assert.Contains(t, string(out), s)
	}

	fcfs := argsParse(t, `{"engine_type":"sglang","sglang":{"schedule_policy":"FCFS"}}`)
	assert.Equal(t, SGLangPolicyFIFO, fcfs.SGLang.SchedulePolicy)
}

func TestParseArgs_NullGivesDefault(t *testing.T) {
	t.Parallel()
	keys := []string{
		"engine_type", "num_gpu_blocks", "block_size", "max_model_len", "enable_prefix_caching",
		"enable_chunked_prefill", "speedup_ratio", "decode_speedup_ratio", "dp_size", "worker_type",
		"preemption_mode", "kv_bytes_per_token", "kv_transfer_bandwidth", "kv_transfer_timing_mode",
		"kv_transfer_abort_timeout_ms", "handoff_session_timeout_ms", "router_load_includes_held",
		"planner_profile_data", "sglang", "is_prefill", "is_decode", "has_perf_model", "aic_backend",
		"aic_nextn", "num_g2_blocks", "bootstrap_port", "reasoning", "trtllm", "startup_time",
	}
	for _, k := range keys {
		a := argsParse(t, `{"`+k+`":null}`)
		assert.Equal(t, DefaultArgs(), a, "key %s", k)
	}

	// max_num_seqs and max_num_batched_tokens: null is Dynamo's "unbounded".
	a := argsParse(t, `{"max_num_seqs":null,"max_num_batched_tokens":null}`)
	assert.Nil(t, a.MaxNumSeqs)
	assert.Nil(t, a.MaxNumBatchedTokens)
	assert.Equal(t, math.MaxInt, a.MaxNumSeqsOrInf())
	assert.Equal(t, math.MaxInt, a.MaxNumBatchedTokensOrInf())

	// Dynamo's range for the conservativeness is [0, 1]; 1.5 is refused.
	_, err := ParseArgs([]byte(`{"engine_type":"sglang","sglang":{"schedule_conservativeness":1.5}}`))
	require.Error(t, err)

	sg := argsParse(t, `{"engine_type":"sglang","sglang":{"page_size":null,"schedule_policy":null,"max_running_requests":null}}`)
	assert.Equal(t, 1, sg.SGLang.PageSize)
	assert.Equal(t, SGLangPolicyFIFO, sg.SGLang.SchedulePolicy)
	assert.Nil(t, sg.SGLang.MaxRunningRequests)
}

func TestParseArgs_AllModeledKeys(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{
		"engine_type": "vllm", "num_gpu_blocks": 512, "block_size": 16, "max_model_len": 8192,
		"max_num_seqs": 8, "max_num_batched_tokens": 2048, "enable_prefix_caching": false,
		"enable_chunked_prefill": false, "speedup_ratio": 20, "decode_speedup_ratio": 1.5,
		"dp_size": 1, "worker_type": "prefill", "preemption_mode": "fifo",
		"kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 64,
		"kv_transfer_timing_mode": "destination_missing", "kv_transfer_abort_timeout_ms": 2000,
		"handoff_session_timeout_ms": 60000, "router_load_includes_held": true,
		"planner_profile_data": "profiles/h100.json"
	}`)
	assert.Equal(t, Args{
		EngineType:               EngineVLLM,
		NumGPUBlocks:             512,
		BlockSize:                16,
		MaxModelLen:              argsIntP(8192),
		MaxNumSeqs:               argsIntP(8),
		MaxNumBatchedTokens:      argsIntP(2048),
		SpeedupRatio:             20,
		DecodeSpeedupRatio:       1.5,
		DPSize:                   1,
		WorkerType:               WorkerPrefill,
		PreemptionMode:           PreemptFIFO,
		KVBytesPerToken:          argsIntP(131072),
		KVTransferBandwidth:      argsFloatP(64),
		KVTransferTimingMode:     TransferDestinationMissing,
		KVTransferAbortTimeoutMs: argsInt64P(2000),
		HandoffSessionTimeoutMs:  60000,
		RouterLoadIncludesHeld:   true,
		PlannerProfileData:       "profiles/h100.json",
	}, a)
}

func TestParseArgs_RoundTrip(t *testing.T) {
	t.Parallel()
	inputs := []string{
		`{}`,
		`{"max_num_seqs":null,"kv_transfer_bandwidth":0,"kv_bytes_per_token":0}`,
		`{"num_gpu_blocks":100,"block_size":8,"max_model_len":512,"worker_type":"decode","kv_transfer_abort_timeout_ms":5}`,
		`{"engine_type":"sglang","block_size":4,"sglang":{"schedule_policy":"lpm","max_running_requests":3,"optimistic_prefill":true}}`,
		`{"engine_type":"sglang","block_size":3}`,
		`{"sglang":{"page_size":7}}`,
	}
	for _, in := range inputs {
		a := argsParse(t, in)
		out, err := json.Marshal(a)
		require.NoError(t, err)
		b, err := ParseArgs(out)
		require.NoError(t, err, "reparse of %s", out)
		assert.Equal(t, a, b, "input %s, marshalled %s", in, out)
	}
}

// A random valid configuration survives marshal and parse unchanged.
func TestParseArgs_RoundTripProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		m := map[string]any{}
		maybe := func(key string, gen func() any) {
			if rapid.Bool().Draw(t, key+"?") {
				m[key] = gen()
			}
		}
		engine := rapid.SampledFrom([]string{"vllm", "VLLM", "sglang", "SGLang"}).Draw(t, "engine")
		m["engine_type"] = engine
		block := rapid.IntRange(2, 128).Draw(t, "block")
		maybe("block_size", func() any { return block })
		maybe("num_gpu_blocks", func() any { return rapid.IntRange(1, 1<<20).Draw(t, "blocks") })
		maybe("max_num_seqs", func() any {
			return rapid.SampledFrom([]any{nil, 1, 8, 256, 4096}).Draw(t, "seqs")
		})
		maybe("max_num_batched_tokens", func() any {
			return rapid.SampledFrom([]any{nil, 1, 2048, 8192}).Draw(t, "batched")
		})
		maybe("speedup_ratio", func() any { return rapid.Float64Range(0, 1000).Draw(t, "speedup") })
		maybe("decode_speedup_ratio", func() any { return rapid.Float64Range(0.01, 10).Draw(t, "dspeedup") })
		maybe("worker_type", func() any {
			return rapid.SampledFrom([]string{"aggregated", "Prefill", "DECODE"}).Draw(t, "worker")
		})
		maybe("kv_transfer_abort_timeout_ms", func() any { return rapid.Int64Range(0, 1e9).Draw(t, "abort") })
		maybe("kv_transfer_bandwidth", func() any { return rapid.Float64Range(0, 1000).Draw(t, "bw") })
		maybe("kv_bytes_per_token", func() any { return rapid.IntRange(0, 1<<24).Draw(t, "kvb") })
		maybe("router_load_includes_held", func() any { return rapid.Bool().Draw(t, "held") })
		if strings.EqualFold(engine, "sglang") && rapid.Bool().Draw(t, "sglang?") {
			m["sglang"] = map[string]any{
				"chunked_prefill_size": block * rapid.IntRange(1, 64).Draw(t, "chunks"),
				"optimistic_prefill":   rapid.Bool().Draw(t, "optimistic"),
				"schedule_policy":      rapid.SampledFrom([]string{"fifo", "fcfs", "lpm"}).Draw(t, "policy"),
			}
		}
		a, err := ArgsFromMap(m)
		if err != nil {
			t.Fatalf("valid map %v rejected: %v", m, err)
		}
		out, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseArgs(out)
		if err != nil {
			t.Fatalf("reparse of %s: %v", out, err)
		}
		if !assert.ObjectsAreEqual(a, b) {
			t.Fatalf("round trip changed args:\n%+v\n%+v", a, b)
		}
	})
}

func TestParseArgs_LegacyWorkerFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want WorkerType
	}{
		{`{"is_prefill":true}`, WorkerPrefill},
		{`{"is_decode":true}`, WorkerDecode},
		{`{"is_prefill":false,"is_decode":false}`, WorkerAggregated},
		{`{"is_prefill":true,"worker_type":"prefill"}`, WorkerPrefill},
		{`{"is_prefill":false,"worker_type":"decode"}`, WorkerDecode},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, argsParse(t, c.in).WorkerType, "input %s", c.in)
	}
}

func TestParseArgs_AbortTimeoutZeroIsNone(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{"kv_transfer_abort_timeout_ms":0}`)
	assert.Nil(t, a.KVTransferAbortTimeoutMs)
	_, ok := a.AbortTimeoutMs()
	assert.False(t, ok)

	b := argsParse(t, `{"kv_transfer_abort_timeout_ms":2000}`)
	ms, ok := b.AbortTimeoutMs()
	assert.True(t, ok)
	assert.Equal(t, int64(2000), ms)

	hand := DefaultArgs()
	hand.KVTransferAbortTimeoutMs = argsInt64P(0)
	_, ok = hand.AbortTimeoutMs()
	assert.False(t, ok, "a hand-built 0 must not abort every hold at once")
}

func TestParseArgs_DynamoOnlyKeysAccepted(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{
		"has_perf_model": true, "startup_time": 2.5, "enable_local_indexer": true,
		"bootstrap_port": 8998, "zmq_kv_events_port": 5557, "zmq_replay_port": 5558,
		"router_queue_policy": "fcfs", "response_replay_trace_path": "trace.jsonl",
		"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 0.5},
		"gpu_memory_utilization": 0.9, "mem_fraction_static": 0.8, "free_gpu_memory_fraction": 0.85,
		"aic_system": "h200_sxm", "aic_systems_path": "/x", "aic_backend_version": "0.12.0",
		"aic_model_path": "m", "aic_tp_size": 2, "aic_moe_tp_size": 1, "aic_moe_ep_size": 2,
		"aic_attention_dp_size": 1, "aic_gemm_dtype": "fp8", "aic_moe_dtype": "fp8",
		"aic_fmha_dtype": "fp8", "aic_kv_cache_dtype": "fp8", "aic_comm_dtype": "half",
		"aic_nextn_accept_rates": "0.85,0.3,0", "aic_mtp_seed": 42, "offload_batch_size": 32,
		"bandwidth_g1_to_g2_gbps": 50, "bandwidth_g2_to_g1_gbps": 50, "bandwidth_g2_to_g3_gbps": 10,
		"bandwidth_g3_to_g2_gbps": 10, "bandwidth_g2_to_g4_gbps": 1, "bandwidth_g4_to_g2_gbps": 1,
		"g1_backend": "KVBM", "trtllm": {"capacity_scheduler_policy": "guaranteed_no_evict"},
		"aic_backend": null, "aic_nextn": null, "num_g2_blocks": 0, "num_g3_blocks": null,
		"enable_g4_storage": false
	}`)
	// Without a host tier (num_g2_blocks 0) the bandwidths are kept but
	// time nothing.
	want := DefaultArgs()
	want.BandwidthG2ToG1, want.BandwidthG1ToG2 = new(50.0), new(50.0)
	want.BandwidthG3ToG2, want.BandwidthG4ToG2 = new(10.0), new(1.0)
	want.BandwidthG2ToG3, want.BandwidthG2ToG4 = new(10.0), new(1.0)
	want.OffloadBatchSize = 32
	assert.Equal(t, want, a)
}

func TestParseArgsLayers_Overlay(t *testing.T) {
	t.Parallel()
	global := []byte(`{"block_size":16,"speedup_ratio":20,"max_num_seqs":64,"kv_transfer_abort_timeout_ms":2000,
		"engine_type":"sglang","sglang":{"schedule_policy":"lpm","chunked_prefill_size":1024}}`)
	pool := []byte(`{"num_gpu_blocks":256,"max_num_seqs":null,"worker_type":"decode",
		"sglang":{"optimistic_prefill":true}}`)
	a, err := ParseArgsLayers(global, pool)
	require.NoError(t, err)
	assert.Equal(t, 16, a.BlockSize)
	assert.Equal(t, 20.0, a.SpeedupRatio)
	assert.Equal(t, 256, a.NumGPUBlocks)
	assert.Nil(t, a.MaxNumSeqs, "null in the later layer resets to unbounded")
	assert.Equal(t, WorkerDecode, a.WorkerType)
	ms, ok := a.AbortTimeoutMs()
	assert.True(t, ok)
	assert.Equal(t, int64(2000), ms)
	assert.Equal(t, SGLangPolicyLPM, a.SGLang.SchedulePolicy, "nested keys merge")
	assert.Equal(t, 1024, a.SGLang.ChunkedPrefillSize)
	assert.True(t, a.SGLang.OptimisticPrefill)

	// A later layer's value wins even when it fixes an earlier invalid one.
	b, err := ParseArgsLayers([]byte(`{"block_size":1}`), []byte(`{"block_size":4}`))
	require.NoError(t, err)
	assert.Equal(t, 4, b.BlockSize)

	// Malformed layers are named by position.
	_, err = ParseArgsLayers([]byte(`{}`), []byte(`{`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "layer 2 of 2")
}

func TestArgsFromMap_JavaScriptNumbers(t *testing.T) {
	t.Parallel()
	m := map[string]any{
		"num_gpu_blocks":               int64(512),
		"block_size":                   float64(16),
		"max_num_seqs":                 float64(8),
		"speedup_ratio":                int64(20),
		"kv_transfer_bandwidth":        0.5,
		"kv_transfer_abort_timeout_ms": float64(1500),
		"engine_type":                  "vLLM",
		"sglang":                       map[string]any{"page_size": int64(16)},
	}
	a, err := ArgsFromMap(m)
	require.NoError(t, err)
	assert.Equal(t, 512, a.NumGPUBlocks)
	assert.Equal(t, 16, a.BlockSize)
	assert.Equal(t, argsIntP(8), a.MaxNumSeqs)
	assert.Equal(t, 20.0, a.SpeedupRatio)
	assert.Equal(t, argsFloatP(0.5), a.KVTransferBandwidth)
	assert.Equal(t, argsInt64P(1500), a.KVTransferAbortTimeoutMs)
	assert.Equal(t, int64(16), m["sglang"].(map[string]any)["page_size"], "input map untouched")

	bad := []struct {
		m     map[string]any
		field string
	}{
		{map[string]any{"num_gpu_blocks": 1.5}, "num_gpu_blocks"},
		{map[string]any{"num_gpu_blocks": math.NaN()}, "num_gpu_blocks"},
		{map[string]any{"num_gpu_blocks": math.Inf(1)}, "num_gpu_blocks"},
		{map[string]any{"speedup_ratio": math.NaN()}, "speedup_ratio"},
		{map[string]any{"kv_transfer_bandwidth": math.Inf(1)}, "kv_transfer_bandwidth"},
		{map[string]any{"max_num_seqs": uint64(math.MaxUint64)}, "max_num_seqs"},
		{map[string]any{"sglang": map[string]any{"page_size": "4"}}, "sglang.page_size"},
	}
	for _, c := range bad {
		_, err := ArgsFromMap(c.m)
		var ae *ArgError
		require.True(t, errors.As(err, &ae), "input %v: %v", c.m, err)
		assert.Equal(t, c.field, ae.Field)
	}
}

func TestArgsFromMapLayers_DoesNotAliasInputs(t *testing.T) {
	t.Parallel()
	g := map[string]any{"engine_type": "sglang", "sglang": map[string]any{"schedule_policy": "lpm"}}
	p := map[string]any{"sglang": map[string]any{"optimistic_prefill": true}}
	_, err := ArgsFromMapLayers(g, nil, p)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"schedule_policy": "lpm"}, g["sglang"])
	assert.Equal(t, map[string]any{"optimistic_prefill": true}, p["sglang"])
}

func TestArgs_ValidateHandBuilt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		modify func(*Args)
		field  string
	}{
		{"zero value block size", func(a *Args) { a.BlockSize = 0 }, "block_size"},
		{"uppercase enum", func(a *Args) { a.EngineType = "VLLM" }, "engine_type"},
		{"trtllm policy", func(a *Args) {
			a.EngineType = EngineTRTLLM
			a.TRTLLM = &TRTLLMArgs{CapacitySchedulerPolicy: "STATIC_BATCH"}
		}, "trtllm.capacity_scheduler_policy"},
		{"empty worker", func(a *Args) { a.WorkerType = "" }, "worker_type"},
		{"empty preemption", func(a *Args) { a.PreemptionMode = "" }, "preemption_mode"},
		{"empty timing mode", func(a *Args) { a.KVTransferTimingMode = "" }, "kv_transfer_timing_mode"},
		{"nan speedup", func(a *Args) { a.SpeedupRatio = math.NaN() }, "speedup_ratio"},
		{"infinite decode speedup", func(a *Args) { a.DecodeSpeedupRatio = math.Inf(1) }, "decode_speedup_ratio"},
		{"sglang without sub-object", func(a *Args) { a.EngineType = EngineSGLang }, "sglang"},
		{"fcfs not normalized", func(a *Args) {
			sg := DefaultSGLangArgs()
			sg.SchedulePolicy = "fcfs"
			a.SGLang = &sg
		}, "sglang.schedule_policy"},
		{"conservativeness nan", func(a *Args) {
			sg := DefaultSGLangArgs()
			sg.ScheduleConservativeness = math.NaN()
			a.SGLang = &sg
		}, "sglang.schedule_conservativeness"},
		{"conservativeness infinite", func(a *Args) {
			sg := DefaultSGLangArgs()
			sg.ScheduleConservativeness = math.Inf(1)
			a.SGLang = &sg
		}, "sglang.schedule_conservativeness"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := DefaultArgs()
			c.modify(&a)
			err := a.Validate()
			var ae *ArgError
			require.True(t, errors.As(err, &ae), "got %v", err)
			assert.Equal(t, c.field, ae.Field, "error: %v", err)
		})
	}

	// SGLang knobs under a vLLM engine are kept but not cross-checked.
	a := DefaultArgs()
	sg := DefaultSGLangArgs()
	a.SGLang = &sg
	assert.NoError(t, a.Validate())
}

func TestArgs_TransferDelayMs(t *testing.T) {
	t.Parallel()
	// 128 tokens × 1e6 B at 1 GB/s = 1.28e8 B / 1e9 B/s = 0.128 s.
	a := DefaultArgs()
	a.KVBytesPerToken = argsIntP(1_000_000)
	a.KVTransferBandwidth = argsFloatP(1)
	assert.InDelta(t, 128.0, a.TransferDelayMs(128), 1e-9)
	// 1000 tokens × 131072 B at 64 GB/s = 1.31072e8 / 6.4e10 s = 2.048 ms.
	a.KVBytesPerToken = argsIntP(131072)
	a.KVTransferBandwidth = argsFloatP(64)
	assert.InDelta(t, 2.048, a.TransferDelayMs(1000), 1e-9)
	assert.Zero(t, a.TransferDelayMs(0))

	a.KVTransferBandwidth = argsFloatP(0)
	assert.Zero(t, a.TransferDelayMs(1000), "bandwidth 0 disables the delay")
	a.KVTransferBandwidth = nil
	assert.Zero(t, a.TransferDelayMs(1000))
	a.KVTransferBandwidth = argsFloatP(64)
	a.KVBytesPerToken = nil
	assert.Zero(t, a.TransferDelayMs(1000))
}

func TestArgs_MaxOrInf(t *testing.T) {
	t.Parallel()
	a := DefaultArgs()
	assert.Equal(t, 256, a.MaxNumSeqsOrInf())
	assert.Equal(t, 8192, a.MaxNumBatchedTokensOrInf())
}

func TestParseArgs_TRTLLM(t *testing.T) {
	t.Parallel()
	a := argsParse(t, `{"engine_type":"TRTLLM"}`)
	assert.Equal(t, EngineTRTLLM, a.EngineType)
	assert.Equal(t, DefaultBlockSizeTRTLLM, a.BlockSize, "TRT-LLM's block size by default")
	require.NotNil(t, a.TRTLLM)
	assert.Equal(t, TRTLLMGuaranteedNoEvict, a.TRTLLM.CapacitySchedulerPolicy)

	a = argsParse(t, `{"engine_type":"trtllm","block_size":16,"max_model_len":4096,"trtllm":{"capacity_scheduler_policy":"MAX_UTILIZATION"}}`)
	assert.Equal(t, 16, a.BlockSize)
	assert.Equal(t, TRTLLMMaxUtilization, a.TRTLLM.CapacitySchedulerPolicy, "stored lowercase")
	require.NotNil(t, a.MaxModelLen)

	// Under another engine the object is checked, then dropped.
	a = argsParse(t, `{"engine_type":"vllm","trtllm":{"capacity_scheduler_policy":"max_utilization"}}`)
	assert.Nil(t, a.TRTLLM)
	assert.Equal(t, DefaultBlockSizeVLLM, a.BlockSize)
}
