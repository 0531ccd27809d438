package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvstrand/mocker/internal/jsonval"
	"github.com/kvstrand/mocker/internal/spell"
)

// maxKeyTypo is the edit distance within which an unknown key is taken for
// a typo of a valid one (num_gpu_block) and the valid one is suggested.
const maxKeyTypo = 2

// ArgError says which engine argument is wrong and why. Every error from
// Validate is one, and so is every error from the parsers except malformed
// JSON; reach it with errors.As. Field is the JSON key, dotted for nested
// keys ("sglang.page_size").
type ArgError struct {
	Field   string
	Message string
}

// Error implements error as "field: message".
func (e *ArgError) Error() string {
	return e.Field + ": " + e.Message
}

func argErr(field, format string, a ...any) *ArgError {
	return &ArgError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// ParseArgs decodes one worker's engine arguments from a JSON object with
// Dynamo's MockEngineArgs keys and defaults, resolves engine-dependent
// defaults and validates the result. Empty input gives the defaults of a vLLM
// aggregated worker (DefaultArgs).
//
// Keys mocker models (times are modeled ms):
//
//	KEY                           ACCEPTS                                DEFAULT
//	engine_type                   "vllm" | "sglang" | "trtllm"           "vllm"
//	num_gpu_blocks                integer ≥ 1                            16384
//	block_size                    integer ≥ 0, 0 = by engine; vllm and   vllm 64, trtllm 32,
//	                              trtllm ≥ 2                             sglang page_size or 1
//	max_model_len                 integer ≥ 1, vllm and trtllm only      none
//	max_num_seqs                  integer ≥ 1, null = unbounded          256
//	max_num_batched_tokens        integer ≥ 1, null = unbounded          8192
//	enable_prefix_caching         boolean                                true
//	enable_chunked_prefill        boolean                                true
//	speedup_ratio                 number ≥ 0, 0 = no scaling             1
//	decode_speedup_ratio          number ≥ 0, 0 = no extra speedup       1
//	dp_size                       integer ≥ 1 (ranks per worker)         1
//	worker_type                   "aggregated" | "prefill" | "decode"    "aggregated"
//	preemption_mode               "lifo" | "fifo"                        "lifo"
//	kv_bytes_per_token            integer ≥ 0 (also kv_cache_bytes_per_token,
//	                              kv_transfer_bytes_per_token)           none
//	kv_transfer_bandwidth         number ≥ 0 GB/s, 0 = no delay          none
//	num_g2_blocks                 integer ≥ 0 (vllm, trtllm host tier)   0: no tier
//	bandwidth_g2_to_g1_gbps       number ≥ 0 GB/s, 0 = no onboard time   14
//	kv_transfer_timing_mode       "full_prompt" | "destination_missing"  "full_prompt"
//	kv_transfer_abort_timeout_ms  integer ≥ 0 ms, 0 = none               none
//	handoff_session_timeout_ms    integer ≥ 1 ms                         300000
//	router_load_includes_held     boolean                                false
//	reserve_takes_slot            boolean (mocker's former slot rule)    false
//	dynamo_compat                 boolean                                false
//	planner_profile_data          path of perf.FromProfile data (JSON,    none: polynomial
//	                              NPZ or profiler results directory)
//	timing_model                  "polynomial" | "interpolated" |        polynomial, interpolated
//	                              {"type":"fixed","prefill_ms":p,        with planner_profile_data
//	                               "decode_ms":d}
//	sglang                        object, see below                      SGLang defaults
//	trtllm                        {"capacity_scheduler_policy":          guaranteed_no_evict
//	                              "guaranteed_no_evict" |
//	                              "max_utilization"}
//
// The sglang object (read only when engine_type is sglang, and filled with
// defaults for it when absent): schedule_policy "fifo" | "fcfs" | "lpm"
// ("fifo"; fcfs is stored as fifo), page_size ≥ 1 (block_size), which must
// equal block_size when both are given, max_prefill_tokens ≥ 1 (16384),
// chunked_prefill_size ≥ 1 and a multiple of block_size (8192, rounded down
// to a multiple of block_size when not given), clip_max_new_tokens ≥ 1
// (4096), schedule_conservativeness in [0, 1] (1), max_running_requests ≥ 1
// (none), and mocker's optimistic_prefill boolean (false: a disaggregated
// SGLang prefill waits for the decode side's reservation; true: it computes
// first and can strand KV like vLLM).
//
// The trtllm object (read only when engine_type is trtllm, checked always):
// capacity_scheduler_policy picks how a trtllm worker admits. Under
// "guaranteed_no_evict" a request is admitted only when the pool can hold
// its prompt and all its max_tokens beside what every running request may
// still take, so nothing is ever preempted, and max_tokens is cut to the
// room the pool has after the prompt; "max_utilization" admits on the
// blocks a request needs now and preempts the newest running request when
// the pool runs dry, as the vllm engine does.
//
// Decoding is strict:
//   - An unknown key is an error that names it and lists the valid keys
//     (inside sglang the error names "sglang.key"). Dynamo's removed
//     watermark is unknown here as it is there.
//   - A value of the wrong type is an error that names the field and the
//     type wanted, e.g. `num_gpu_blocks: want a positive integer, got string
//     "x"`. An integer field takes any number with an integral value (64,
//     64.0, 6.4e1).
//   - An out-of-range value is an error that names the field and what is
//     allowed (see Validate).
//   - null means "not given": the default applies. For max_num_seqs and
//     max_num_batched_tokens that default is "unbounded", as in Dynamo, since
//     null is the only way to ask for it.
//   - Enum strings are case-insensitive and stored lowercase.
//   - kv_transfer_abort_timeout_ms 0 means no abort timeout and is stored as
//     nil. handoff_session_timeout_ms cannot be 0: it is what guarantees a
//     held source is reclaimed, so use a large value instead.
//   - Ranges are Dynamo's; docs/fidelity.md lists where mocker's behaviour
//     still differs and what dynamo_compat changes.
//
// Dynamo keys that describe deployment rather than the modeled engine are
// accepted with their types checked and then ignored, so a config copied
// from Dynamo loads: has_perf_model (any value), startup_time,
// enable_local_indexer, bootstrap_port (the cluster assigns transfer
// addresses), zmq_kv_events_port, zmq_replay_port, router_queue_policy,
// response_replay_trace_path and reasoning (output token ids are random),
// gpu_memory_utilization, mem_fraction_static and free_gpu_memory_fraction
// (only used to estimate num_gpu_blocks), aic_system, aic_systems_path,
// aic_backend_version, aic_model_path, aic_tp_size, aic_moe_tp_size,
// aic_moe_ep_size, aic_attention_dp_size, aic_*_dtype,
// aic_nextn_accept_rates, aic_mtp_seed, and
// g1_backend. The legacy booleans is_prefill and is_decode select worker_type; both true is an
// error, and a true one that contradicts an explicit worker_type is too.
//
// Dynamo keys whose effect mocker does not model, and which would silently
// change what its numbers mean, are rejected when set to anything but their
// "off" value: aic_backend (AIConfigurator timing; use planner_profile_data)
// and aic_nextn (MTP bursts; use decode_speedup_ratio).
//
// Errors about a field are *ArgError; malformed JSON is a plain error
// carrying the byte offset. To overlay a pool's arguments on global ones,
// use ParseArgsLayers.
func ParseArgs(data []byte) (Args, error) {
	return ParseArgsLayers(data)
}

// ParseArgsLayers parses several JSON objects as one, later layers
// overriding earlier ones key by key, and then applies the rules of
// ParseArgs to the result. Nested objects (sglang) merge key by key too, so
// a pool can change sglang.page_size alone. A null in a later layer resets
// that key to its default (for max_num_seqs: unbounded). A typical call is
// ParseArgsLayers(clusterArgs, poolArgs).
func ParseArgsLayers(layers ...[]byte) (Args, error) {
	maps := make([]map[string]any, 0, len(layers))
	for i, data := range layers {
		m, err := decodeArgsObject(data)
		if err != nil {
			if len(layers) > 1 {
				return Args{}, fmt.Errorf("engine args layer %d of %d: %w", i+1, len(layers), err)
			}
			return Args{}, fmt.Errorf("engine args: %w", err)
		}
		maps = append(maps, m)
	}
	return ArgsFromMapLayers(maps...)
}

// ArgsFromMap is ParseArgs for a value already decoded into a map, as a
// JavaScript object exported to Go is: numbers may be int64, float64 (an
// integral float64 is accepted for an integer field), any Go integer type or
// json.Number; nested objects are map[string]any. The map is not modified.
func ArgsFromMap(m map[string]any) (Args, error) {
	return ArgsFromMapLayers(m)
}

// ArgsFromMapLayers is ParseArgsLayers for decoded maps: later maps override
// earlier ones key by key, nested objects merging too. Nil maps are skipped.
func ArgsFromMapLayers(layers ...map[string]any) (Args, error) {
	merged := map[string]any{}
	for _, m := range layers {
		mergeArgMaps(merged, m)
	}
	return buildArgs(merged)
}

// decodeArgsObject reads one JSON object, keeping numbers exact.
func decodeArgsObject(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
		}
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: unexpected data after the object at byte %d", dec.InputOffset())
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a JSON object, got %s", jsonval.Describe(v))
	}
	return m, nil
}

// mergeArgMaps overlays src on dst, merging nested objects and copying them
// so the caller's maps are never aliased or modified.
func mergeArgMaps(dst, src map[string]any) {
	for k, v := range src {
		sub, isMap := v.(map[string]any)
		if !isMap {
			dst[k] = v
			continue
		}
		prev, prevIsMap := dst[k].(map[string]any)
		if !prevIsMap {
			prev = map[string]any{}
		}
		mergeArgMaps(prev, sub)
		dst[k] = prev
	}
}

// argParser carries what parsing learns beyond the Args values: which keys
// were given, for the rules that depend on it.
type argParser struct {
	a            Args
	blockSizeSet bool
	pageSizeSet  bool
	chunkSet     bool
	isPrefill    bool
	isDecode     bool
	workerSet    bool
	sglangRaw    map[string]any
	trtllmRaw    map[string]any
	// kvBytesKey is the key that set kv_bytes_per_token, which three
	// Dynamo spellings may set; two that disagree are an error.
	kvBytesKey string
}

// setKVBytes stores a kv_bytes_per_token value given under key.
func (p *argParser) setKVBytes(key string, v any) error {
	n, err := argIntValue(key, v, argWantNonNegative)
	if err != nil {
		return err
	}
	if p.kvBytesKey != "" && *p.a.KVBytesPerToken != n {
		return argErr(key, "%d contradicts %s %d; they name the same quantity, give one", n, p.kvBytesKey, *p.a.KVBytesPerToken)
	}
	p.kvBytesKey = key
	p.a.KVBytesPerToken = &n
	return nil
}

type argKeySpec struct {
	key   string
	apply func(p *argParser, field string, v any) error
}

// argNullUnbounded lists the keys where an explicit null means "no limit"
// rather than the default, as in Dynamo; for every other key null keeps the
// default.
var argNullUnbounded = map[string]func(p *argParser){
	"max_num_seqs":           func(p *argParser) { p.a.MaxNumSeqs = nil },
	"max_num_batched_tokens": func(p *argParser) { p.a.MaxNumBatchedTokens = nil },
}

// argKeys lists every top-level key ParseArgs accepts, in the order they are
// applied.
var argKeys = append(slices.Clip(modeledArgKeys), dynamoArgKeys...)

// modeledArgKeys are the keys mocker acts on.
var modeledArgKeys = []argKeySpec{
	{"engine_type", func(p *argParser, _ string, v any) error {
		s, err := argEnumValue("engine_type", v, "vllm", "sglang", "trtllm")
		if err != nil {
			return err
		}
		p.a.EngineType = EngineType(s)
		return nil
	}},
	{"num_gpu_blocks", argIntInto(func(p *argParser) *int { return &p.a.NumGPUBlocks }, argWantPositive)},
	{"block_size", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("block_size", v, argWantNonNegative)
		if err != nil {
			return err
		}
		p.a.BlockSize = n
		p.blockSizeSet = n != 0
		return nil
	}},
	{"max_model_len", argOptIntInto(func(p *argParser) **int { return &p.a.MaxModelLen }, argWantPositive)},
	{"max_num_seqs", argOptIntInto(func(p *argParser) **int { return &p.a.MaxNumSeqs }, argWantPositive)},
	{"max_num_batched_tokens", argOptIntInto(func(p *argParser) **int { return &p.a.MaxNumBatchedTokens }, argWantPositive)},
	{"enable_prefix_caching", argBoolInto(func(p *argParser) *bool { return &p.a.EnablePrefixCaching })},
	{"enable_chunked_prefill", argBoolInto(func(p *argParser) *bool { return &p.a.EnableChunkedPrefill })},
	{"speedup_ratio", argFloatInto(func(p *argParser) *float64 { return &p.a.SpeedupRatio }, argWantNonNegativeNumber)},
	{"decode_speedup_ratio", argFloatInto(func(p *argParser) *float64 { return &p.a.DecodeSpeedupRatio }, argWantNonNegativeNumber)},
	{"dp_size", argIntInto(func(p *argParser) *int { return &p.a.DPSize }, argWantPositive)},
	{"worker_type", func(p *argParser, _ string, v any) error {
		s, err := argEnumValue("worker_type", v, "aggregated", "prefill", "decode")
		if err != nil {
			return err
		}
		p.a.WorkerType = WorkerType(s)
		p.workerSet = true
		return nil
	}},
	{"is_prefill", argBoolInto(func(p *argParser) *bool { return &p.isPrefill })},
	{"is_decode", argBoolInto(func(p *argParser) *bool { return &p.isDecode })},
	{"preemption_mode", func(p *argParser, _ string, v any) error {
		s, err := argEnumValue("preemption_mode", v, "lifo", "fifo")
		if err != nil {
			return err
		}
		p.a.PreemptionMode = PreemptionMode(s)
		return nil
	}},
	{"kv_bytes_per_token", func(p *argParser, k string, v any) error { return p.setKVBytes(k, v) }},
	// Dynamo main's names for the same quantity.
	{"kv_cache_bytes_per_token", func(p *argParser, k string, v any) error { return p.setKVBytes(k, v) }},
	{"kv_transfer_bytes_per_token", func(p *argParser, k string, v any) error { return p.setKVBytes(k, v) }},
	{"kv_transfer_bandwidth", func(p *argParser, _ string, v any) error {
		f, err := argFloatValue("kv_transfer_bandwidth", v, argWantNonNegativeNumber)
		if err != nil {
			return err
		}
		p.a.KVTransferBandwidth = &f
		return nil
	}},
	{"num_g2_blocks", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("num_g2_blocks", v, argWantNonNegative)
		if err != nil {
			return err
		}
		if n < 0 || n > math.MaxInt32 {
			return argErr("num_g2_blocks", "want %s up to %d, got %d", argWantNonNegative, math.MaxInt32, n)
		}
		p.a.NumG2Blocks = n
		return nil
	}},
	argGbps("bandwidth_g2_to_g1_gbps", func(a *Args) **float64 { return &a.BandwidthG2ToG1 }),
	argGbps("bandwidth_g1_to_g2_gbps", func(a *Args) **float64 { return &a.BandwidthG1ToG2 }),
	argGbps("bandwidth_g2_to_g3_gbps", func(a *Args) **float64 { return &a.BandwidthG2ToG3 }),
	argGbps("bandwidth_g2_to_g4_gbps", func(a *Args) **float64 { return &a.BandwidthG2ToG4 }),
	{"offload_batch_size", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("offload_batch_size", v, argWantNonNegative)
		if err != nil {
			return err
		}
		if n < 0 || n > math.MaxInt32 {
			return argErr("offload_batch_size", "want %s up to %d, got %d", argWantNonNegative, math.MaxInt32, n)
		}
		p.a.OffloadBatchSize = n
		return nil
	}},
	{"num_g3_blocks", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("num_g3_blocks", v, argWantNonNegative)
		if err != nil {
			return err
		}
		if n < 0 || n > math.MaxInt32 {
			return argErr("num_g3_blocks", "want %s up to %d, got %d", argWantNonNegative, math.MaxInt32, n)
		}
		p.a.NumG3Blocks = n
		return nil
	}},
	{"enable_g4_storage", func(p *argParser, _ string, v any) error {
		b, err := argBoolValue("enable_g4_storage", v)
		if err != nil {
			return err
		}
		p.a.EnableG4Storage = b
		return nil
	}},
	argGbps("bandwidth_g3_to_g2_gbps", func(a *Args) **float64 { return &a.BandwidthG3ToG2 }),
	argGbps("bandwidth_g4_to_g2_gbps", func(a *Args) **float64 { return &a.BandwidthG4ToG2 }),
	{"kv_transfer_timing_mode", func(p *argParser, _ string, v any) error {
		s, err := argEnumValue("kv_transfer_timing_mode", v, "full_prompt", "destination_missing")
		if err != nil {
			return err
		}
		p.a.KVTransferTimingMode = TransferTimingMode(s)
		return nil
	}},
	{"kv_transfer_abort_timeout_ms", func(p *argParser, _ string, v any) error {
		n, err := argInt64Value("kv_transfer_abort_timeout_ms", v, argWantNonNegative)
		if err != nil {
			return err
		}
		if n != 0 {
			p.a.KVTransferAbortTimeoutMs = &n
		}
		return nil
	}},
	{"handoff_session_timeout_ms", func(p *argParser, _ string, v any) error {
		n, err := argInt64Value("handoff_session_timeout_ms", v, argWantPositive)
		if err != nil {
			return err
		}
		p.a.HandoffSessionTimeoutMs = n
		return nil
	}},
	{"router_load_includes_held", argBoolInto(func(p *argParser) *bool { return &p.a.RouterLoadIncludesHeld })},
	{"dynamo_compat", argBoolInto(func(p *argParser) *bool { return &p.a.DynamoCompat })},
	{"timing_model", func(p *argParser, _ string, v any) error {
		tm, err := argTimingModel(v)
		if err != nil {
			return err
		}
		p.a.TimingModel = tm
		return nil
	}},
	{"reserve_takes_slot", argBoolInto(func(p *argParser) *bool { return &p.a.ReserveTakesSlot })},
	{"planner_profile_data", func(p *argParser, _ string, v any) error {
		s, err := argStringValue("planner_profile_data", v, "a file path")
		if err != nil {
			return err
		}
		p.a.PlannerProfileData = s
		return nil
	}},
	{"sglang", func(p *argParser, _ string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return argErr("sglang", "want an object, got %s", jsonval.Describe(v))
		}
		p.sglangRaw = m
		return nil
	}},
	{"trtllm", func(p *argParser, _ string, v any) error {
		m, ok := v.(map[string]any)
		if !ok {
			return argErr("trtllm", "want an object, got %s", jsonval.Describe(v))
		}
		p.trtllmRaw = m
		return nil
	}},
}

// dynamoArgKeys are Dynamo's keys mocker does not model: checked, then
// ignored, or rejected when turned on.
var dynamoArgKeys = []argKeySpec{
	{"has_perf_model", func(*argParser, string, any) error { return nil }},
	argIgnoreNumber("startup_time", 0, math.Inf(1)),
	argIgnoreBool("enable_local_indexer"),
	argIgnoreInt("bootstrap_port", 0, math.MaxUint16),
	argIgnoreInt("zmq_kv_events_port", 0, math.MaxUint16),
	argIgnoreInt("zmq_replay_port", 0, math.MaxUint16),
	argIgnoreString("router_queue_policy"),
	argIgnoreString("response_replay_trace_path"),
	argIgnoreObject("reasoning"),
	argIgnoreNumber("gpu_memory_utilization", 0, 1),
	argIgnoreNumber("mem_fraction_static", 0, 1),
	argIgnoreNumber("free_gpu_memory_fraction", 0, 1),
	argIgnoreString("aic_system"),
	argIgnoreString("aic_systems_path"),
	argIgnoreString("aic_backend_version"),
	argIgnoreString("aic_model_path"),
	argIgnoreInt("aic_tp_size", 1, math.MaxInt),
	argIgnoreInt("aic_moe_tp_size", 1, math.MaxInt),
	argIgnoreInt("aic_moe_ep_size", 1, math.MaxInt),
	argIgnoreInt("aic_attention_dp_size", 1, math.MaxInt),
	argIgnoreString("aic_gemm_dtype"),
	argIgnoreString("aic_moe_dtype"),
	argIgnoreString("aic_fmha_dtype"),
	argIgnoreString("aic_kv_cache_dtype"),
	argIgnoreString("aic_comm_dtype"),
	argIgnoreString("aic_nextn_accept_rates"),
	argIgnoreInt("aic_mtp_seed", 0, math.MaxInt),
	{"g1_backend", func(_ *argParser, _ string, v any) error {
		_, err := argEnumValue("g1_backend", v, "kvbm", "native")
		return err
	}},

	// Dynamo knobs rejected unless off: ignoring them would misstate results.
	{"aic_backend", func(_ *argParser, _ string, v any) error {
		if _, err := argStringValue("aic_backend", v, "a string"); err != nil {
			return err
		}
		return argErr("aic_backend", "AIConfigurator timing is not modeled; remove it and give a profile table in planner_profile_data, or keep the default polynomial model")
	}},
	{"aic_nextn", func(_ *argParser, _ string, v any) error {
		if _, err := argIntValue("aic_nextn", v, argWantPositive); err != nil {
			return err
		}
		return argErr("aic_nextn", "MTP draft bursts are not modeled; remove it and use decode_speedup_ratio for faster decode")
	}},
}

var argSGLangKeys = []argKeySpec{
	{"schedule_policy", func(p *argParser, _ string, v any) error {
		s, err := argEnumValue("sglang.schedule_policy", v, "fifo", "fcfs", "lpm")
		if err != nil {
			return err
		}
		if s == "fcfs" {
			s = SGLangPolicyFIFO
		}
		p.a.SGLang.SchedulePolicy = s
		return nil
	}},
	{"page_size", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("sglang.page_size", v, argWantPositive)
		if err != nil {
			return err
		}
		p.a.SGLang.PageSize = n
		p.pageSizeSet = true
		return nil
	}},
	{"max_prefill_tokens", argIntInto(func(p *argParser) *int { return &p.a.SGLang.MaxPrefillTokens }, argWantPositive)},
	{"chunked_prefill_size", func(p *argParser, _ string, v any) error {
		n, err := argIntValue("sglang.chunked_prefill_size", v, argWantPositive)
		if err != nil {
			return err
		}
		p.a.SGLang.ChunkedPrefillSize = n
		p.chunkSet = true
		return nil
	}},
	{"clip_max_new_tokens", argIntInto(func(p *argParser) *int { return &p.a.SGLang.ClipMaxNewTokens }, argWantPositive)},
	{"schedule_conservativeness", argFloatInto(func(p *argParser) *float64 { return &p.a.SGLang.ScheduleConservativeness }, argWantNonNegativeNumber)},
	{"max_running_requests", argOptIntInto(func(p *argParser) **int { return &p.a.SGLang.MaxRunningRequests }, argWantPositive)},
	{"optimistic_prefill", argBoolInto(func(p *argParser) *bool { return &p.a.SGLang.OptimisticPrefill })},
}

// argTimingModel reads timing_model: a type string, or an object with
// type and, for "fixed", prefill_ms and decode_ms.
func argTimingModel(v any) (*TimingModelArgs, error) {
	types := []string{string(TimingPolynomial), string(TimingInterpolated), string(TimingFixed)}
	if _, isStr := v.(string); isStr {
		s, err := argEnumValue("timing_model", v, types...)
		if err != nil {
			return nil, err
		}
		return &TimingModelArgs{Type: TimingModelType(s)}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, argErr("timing_model", "want a type string or an object with \"type\", got %s", jsonval.Describe(v))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tm := &TimingModelArgs{}
	for _, k := range keys {
		switch k {
		case "type":
			s, err := argEnumValue("timing_model.type", m[k], types...)
			if err != nil {
				return nil, err
			}
			tm.Type = TimingModelType(s)
		case "prefill_ms", "decode_ms":
			f, err := argFloatValue("timing_model."+k, m[k], argWantNonNegativeNumber)
			if err != nil {
				return nil, err
			}
			if k == "prefill_ms" {
				tm.PrefillMs = &f
			} else {
				tm.DecodeMs = &f
			}
		default:
			return nil, argErr("timing_model."+k, "unknown key; valid keys are type, prefill_ms, decode_ms")
		}
	}
	if tm.Type == "" {
		return nil, argErr("timing_model.type", "is required: one of %s", strings.Join(types, ", "))
	}
	return tm, nil
}

// Type descriptions used in "want ..." messages.
const (
	argWantPositive          = "a positive integer"
	argWantNonNegative       = "a non-negative integer"
	argWantNonNegativeNumber = "a non-negative number"
)

// buildArgs applies a merged map over DefaultArgs, resolves what depends
// on the engine and validates.
func buildArgs(m map[string]any) (Args, error) {
	if err := argCheckKeys("", m, modeledArgKeys, dynamoArgKeys); err != nil {
		return Args{}, err
	}
	p := &argParser{a: DefaultArgs()}
	for _, ks := range argKeys {
		v, ok := m[ks.key]
		if !ok {
			continue
		}
		if v == nil {
			if reset, ok := argNullUnbounded[ks.key]; ok {
				reset(p)
			}
			continue
		}
		if err := ks.apply(p, ks.key, v); err != nil {
			return Args{}, err
		}
	}
	if err := p.resolveWorkerType(); err != nil {
		return Args{}, err
	}
	if err := p.resolveSGLang(); err != nil {
		return Args{}, err
	}
	if err := p.resolveTRTLLM(); err != nil {
		return Args{}, err
	}
	if p.a.BlockSize == 0 && p.a.EngineType == EngineVLLM {
		p.a.BlockSize = DefaultBlockSizeVLLM
	}
	if !p.blockSizeSet && p.a.EngineType == EngineTRTLLM {
		p.a.BlockSize = DefaultBlockSizeTRTLLM
	}
	if err := p.a.Validate(); err != nil {
		return Args{}, err
	}
	return p.a, nil
}

func (p *argParser) resolveWorkerType() error {
	if p.isPrefill && p.isDecode {
		return argErr("is_prefill", "is_prefill and is_decode cannot both be true; set worker_type instead")
	}
	legacy := WorkerAggregated
	field := ""
	switch {
	case p.isPrefill:
		legacy, field = WorkerPrefill, "is_prefill"
	case p.isDecode:
		legacy, field = WorkerDecode, "is_decode"
	}
	if field == "" {
		return nil
	}
	if p.workerSet && p.a.WorkerType != legacy {
		return argErr(field, "true contradicts worker_type %q; drop the legacy flag", p.a.WorkerType)
	}
	p.a.WorkerType = legacy
	return nil
}

func (p *argParser) resolveSGLang() error {
	if p.a.EngineType != EngineSGLang {
		if p.sglangRaw == nil {
			return nil
		}
		// Checked so a typo surfaces now, kept as given but unused.
		sg := DefaultSGLangArgs()
		p.a.SGLang = &sg
		return p.applySGLang()
	}
	defaults := DefaultSGLangArgs()
	p.a.SGLang = &defaults
	if p.sglangRaw != nil {
		if err := p.applySGLang(); err != nil {
			return err
		}
	}
	sg := p.a.SGLang
	switch {
	case !p.blockSizeSet && p.pageSizeSet && sg.PageSize >= 1:
		p.a.BlockSize = sg.PageSize
	case !p.blockSizeSet:
		p.a.BlockSize = DefaultBlockSizeSGLang
	}
	if !p.pageSizeSet {
		sg.PageSize = p.a.BlockSize
	}
	if !p.chunkSet && p.a.BlockSize > 0 {
		// SGLang cuts chunks at page boundaries anyway, so the rounded
		// default computes the same chunks as the unrounded one.
		sg.ChunkedPrefillSize = max(p.a.BlockSize, sg.ChunkedPrefillSize/p.a.BlockSize*p.a.BlockSize)
	}
	return nil
}

// resolveTRTLLM reads the trtllm object: checked whatever the engine, so a
// typo surfaces now, and kept, with the defaults filled in, for a trtllm
// engine only.
func (p *argParser) resolveTRTLLM() error {
	if p.trtllmRaw == nil && p.a.EngineType != EngineTRTLLM {
		return nil
	}
	t := DefaultTRTLLMArgs()
	if err := argCheckKeys("trtllm.", p.trtllmRaw, argTRTLLMKeys, nil); err != nil {
		return err
	}
	if v, ok := p.trtllmRaw["capacity_scheduler_policy"]; ok && v != nil {
		s, err := argEnumValue("trtllm.capacity_scheduler_policy", v, TRTLLMGuaranteedNoEvict, TRTLLMMaxUtilization)
		if err != nil {
			return err
		}
		t.CapacitySchedulerPolicy = s
	}
	if p.a.EngineType == EngineTRTLLM {
		p.a.TRTLLM = &t
	}
	return nil
}

// argTRTLLMKeys are the keys of the trtllm object; resolveTRTLLM applies
// them.
var argTRTLLMKeys = []argKeySpec{{"capacity_scheduler_policy", nil}}

func (p *argParser) applySGLang() error {
	if err := argCheckKeys("sglang.", p.sglangRaw, argSGLangKeys, nil); err != nil {
		return err
	}
	for _, ks := range argSGLangKeys {
		v, ok := p.sglangRaw[ks.key]
		if !ok || v == nil {
			continue
		}
		if err := ks.apply(p, "sglang."+ks.key, v); err != nil {
			return err
		}
	}
	return nil
}

// argCheckKeys reports the first unknown key in sorted order, so the error is
// the same on every run.
func argCheckKeys(prefix string, m map[string]any, specs, compat []argKeySpec) error {
	known := make(map[string]bool, len(specs)+len(compat))
	names := make([]string, 0, len(specs))
	compatNames := make([]string, 0, len(compat))
	for _, s := range specs {
		known[s.key] = true
		names = append(names, s.key)
	}
	for _, s := range compat {
		known[s.key] = true
		compatNames = append(compatNames, s.key)
	}
	unknown := make([]string, 0)
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	sort.Strings(names)
	sort.Strings(compatNames)
	key := unknown[0]
	msg := "unknown key"
	if near := spell.Closest(key, append(slices.Clip(names), compatNames...), maxKeyTypo); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	where := "engine args"
	if prefix != "" {
		where = strings.TrimSuffix(prefix, ".")
	}
	msg = fmt.Sprintf("%s; valid keys in %s: %s", msg, where, strings.Join(names, ", "))
	if len(compatNames) > 0 {
		msg += "; also accepted from Dynamo (not modeled): " + strings.Join(compatNames, ", ")
	}
	return argErr(prefix+key, "%s", msg)
}

// Value readers. Each names the field and the wanted type when v does not
// fit; range checks beyond the type live in Validate, so hand-built Args get
// the same messages.

func argInt64Value(field string, v any, want string) (int64, error) {
	n, ok := jsonval.AsInt(v)
	if !ok {
		return 0, argErr(field, "want %s, got %s", want, jsonval.Describe(v))
	}
	return n, nil
}

func argIntValue(field string, v any, want string) (int, error) {
	n, err := argInt64Value(field, v, want)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt || n < math.MinInt {
		return 0, argErr(field, "want %s, got %s, which is too large", want, jsonval.Describe(v))
	}
	return int(n), nil
}

func argFloatValue(field string, v any, want string) (float64, error) {
	f, ok := jsonval.AsFloat(v)
	if !ok {
		return 0, argErr(field, "want %s, got %s", want, jsonval.Describe(v))
	}
	return f, nil
}

func argBoolValue(field string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, argErr(field, "want a boolean, got %s", jsonval.Describe(v))
	}
	return b, nil
}

func argStringValue(field string, v any, want string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", argErr(field, "want %s, got %s", want, jsonval.Describe(v))
	}
	return s, nil
}

// argEnumValue reads a case-insensitive enum and returns it lowercase.
func argEnumValue(field string, v any, allowed ...string) (string, error) {
	quoted := make([]string, len(allowed))
	for i, s := range allowed {
		quoted[i] = strconv.Quote(s)
	}
	want := "one of " + strings.Join(quoted, ", ")
	s, err := argStringValue(field, v, want)
	if err != nil {
		return "", err
	}
	low := strings.ToLower(s)
	for _, a := range allowed {
		if low == a {
			return low, nil
		}
	}
	if field == "trtllm.capacity_scheduler_policy" && low == "static_batch" {
		return "", argErr(field, `"static_batch" is not modeled: want %s`, want)
	}
	return "", argErr(field, "want %s, got %s", want, jsonval.Describe(v))
}

func argIntInto(dst func(*argParser) *int, want string) func(*argParser, string, any) error {
	return func(p *argParser, field string, v any) error {
		n, err := argIntValue(field, v, want)
		if err != nil {
			return err
		}
		*dst(p) = n
		return nil
	}
}

func argOptIntInto(dst func(*argParser) **int, want string) func(*argParser, string, any) error {
	return func(p *argParser, field string, v any) error {
		n, err := argIntValue(field, v, want)
		if err != nil {
			return err
		}
		*dst(p) = &n
		return nil
	}
}

func argBoolInto(dst func(*argParser) *bool) func(*argParser, string, any) error {
	return func(p *argParser, field string, v any) error {
		b, err := argBoolValue(field, v)
		if err != nil {
			return err
		}
		*dst(p) = b
		return nil
	}
}

func argFloatInto(dst func(*argParser) *float64, want string) func(*argParser, string, any) error {
	return func(p *argParser, field string, v any) error {
		f, err := argFloatValue(field, v, want)
		if err != nil {
			return err
		}
		*dst(p) = f
		return nil
	}
}

func argIgnoreBool(key string) argKeySpec {
	return argKeySpec{key, func(_ *argParser, _ string, v any) error {
		_, err := argBoolValue(key, v)
		return err
	}}
}

func argIgnoreString(key string) argKeySpec {
	return argKeySpec{key, func(_ *argParser, _ string, v any) error {
		_, err := argStringValue(key, v, "a string")
		return err
	}}
}

func argIgnoreObject(key string) argKeySpec {
	return argKeySpec{key, func(_ *argParser, _ string, v any) error {
		if _, ok := v.(map[string]any); !ok {
			return argErr(key, "want an object, got %s", jsonval.Describe(v))
		}
		return nil
	}}
}

func argIgnoreInt(key string, lo, hi int64) argKeySpec {
	want := fmt.Sprintf("an integer in [%d, %d]", lo, hi)
	if hi == math.MaxInt {
		want = fmt.Sprintf("an integer ≥ %d", lo)
	}
	return argKeySpec{key, func(_ *argParser, _ string, v any) error {
		n, err := argInt64Value(key, v, want)
		if err != nil {
			return err
		}
		if n < lo || n > hi {
			return argErr(key, "want %s, got %d", want, n)
		}
		return nil
	}}
}

// argGbps is a bandwidth key in GB/s, a number ≥ 0, stored in the field
// field picks.
func argGbps(key string, field func(*Args) **float64) argKeySpec {
	return argKeySpec{key, func(p *argParser, _ string, v any) error {
		f, err := argFloatValue(key, v, argWantNonNegativeNumber)
		if err != nil {
			return err
		}
		*field(&p.a) = &f
		return nil
	}}
}

func argIgnoreNumber(key string, lo, hi float64) argKeySpec {
	want := fmt.Sprintf("a number in [%g, %g]", lo, hi)
	if math.IsInf(hi, 1) {
		want = fmt.Sprintf("a number ≥ %g", lo)
	}
	return argKeySpec{key, func(_ *argParser, _ string, v any) error {
		f, err := argFloatValue(key, v, want)
		if err != nil {
			return err
		}
		if !(f >= lo && f <= hi) {
			return argErr(key, "want %s, got %g", want, f)
		}
		return nil
	}}
}

// Validate checks every field of a (parsed or hand-built) Args and returns
// an *ArgError for the first one that is wrong, in field order:
//
//   - engine_type is "vllm", "sglang" or "trtllm"; worker_type, preemption_mode and
//     kv_transfer_timing_mode are one of their lowercase values;
//   - num_gpu_blocks, block_size, max_model_len, max_num_seqs and
//     max_num_batched_tokens (when set) are at least 1, num_gpu_blocks at
//     most 2147483647, block_size at least 2 for vllm and trtllm (Dynamo's
//     range); max_model_len is set only for vllm and trtllm;
//   - speedup_ratio and decode_speedup_ratio are finite numbers ≥ 0;
//   - dp_size is at least 1;
//   - kv_bytes_per_token, kv_transfer_bandwidth and
//     kv_transfer_abort_timeout_ms are ≥ 0 when set (the bandwidth finite);
//     handoff_session_timeout_ms is at least 1;
//   - trtllm, when set: capacity_scheduler_policy "guaranteed_no_evict" or
//     "max_utilization";
//   - sglang, when set: schedule_policy "fifo" or "lpm"; page_size,
//     max_prefill_tokens, chunked_prefill_size, clip_max_new_tokens and
//     max_running_requests at least 1; schedule_conservativeness in
//     [0, 1]; and for an sglang engine page_size equals block_size and
//     chunked_prefill_size is a multiple of it;
//   - timing_model, when set: a known type; "fixed" with prefill_ms and
//     decode_ms finite and ≥ 0, the others without them; "interpolated"
//     exactly when planner_profile_data is set.
func (a Args) Validate() error {
	checks := []func() *ArgError{
		func() *ArgError {
			switch a.EngineType {
			case EngineVLLM, EngineSGLang, EngineTRTLLM:
				return nil
			}
			return argErr("engine_type", `want "vllm", "sglang" or "trtllm", got %q`, a.EngineType)
		},
		func() *ArgError {
			if a.NumGPUBlocks > math.MaxInt32 {
				return argErr("num_gpu_blocks", "must be between 1 and %d, got %d", math.MaxInt32, a.NumGPUBlocks)
			}
			return argAtLeast("num_gpu_blocks", a.NumGPUBlocks, 1, "")
		},
		func() *ArgError {
			if (a.EngineType == EngineVLLM || a.EngineType == EngineTRTLLM) && a.BlockSize == 1 {
				// Dynamo's vLLM mocker requires 2: a one-token block makes
				// the last-token recompute rule drop every prefix hit
				// shorter than the prompt, which no real vLLM config uses.
				// TRT-LLM runs on the same core.
				return argErr("block_size", "must be at least 2 for engine_type %q, as in Dynamo, got 1 (sglang accepts page size 1)", a.EngineType)
			}
			return argAtLeast("block_size", a.BlockSize, 1, " (ParseArgs resolves 0 by engine: vllm 64, sglang page_size)")
		},
		func() *ArgError {
			if a.MaxModelLen == nil {
				return nil
			}
			if a.EngineType != EngineVLLM && a.EngineType != EngineTRTLLM {
				return argErr("max_model_len", "is supported only with engine_type \"vllm\" or \"trtllm\", not %q; remove it", a.EngineType)
			}
			return argAtLeast("max_model_len", *a.MaxModelLen, 1, "")
		},
		func() *ArgError { return argOptAtLeast("max_num_seqs", a.MaxNumSeqs, " (null means unbounded)") },
		func() *ArgError {
			return argOptAtLeast("max_num_batched_tokens", a.MaxNumBatchedTokens, " (null means unbounded)")
		},
		func() *ArgError {
			if math.IsNaN(a.SpeedupRatio) || math.IsInf(a.SpeedupRatio, 0) || a.SpeedupRatio < 0 {
				return argErr("speedup_ratio", "must be a finite number ≥ 0 (0 means no scaling), got %g", a.SpeedupRatio)
			}
			return nil
		},
		func() *ArgError {
			if math.IsNaN(a.DecodeSpeedupRatio) || math.IsInf(a.DecodeSpeedupRatio, 0) || a.DecodeSpeedupRatio < 0 {
				return argErr("decode_speedup_ratio", "must be a finite number ≥ 0 (0 or 1 mean no extra decode speedup, as in Dynamo), got %g", a.DecodeSpeedupRatio)
			}
			return nil
		},
		func() *ArgError {
			if a.DPSize < 1 {
				return argErr("dp_size", "must be at least 1, got %d", a.DPSize)
			}
			return nil
		},
		func() *ArgError {
			switch a.WorkerType {
			case WorkerAggregated, WorkerPrefill, WorkerDecode:
				return nil
			}
			return argErr("worker_type", `want "aggregated", "prefill" or "decode", got %q`, a.WorkerType)
		},
		func() *ArgError {
			switch a.PreemptionMode {
			case PreemptLIFO, PreemptFIFO:
				return nil
			}
			return argErr("preemption_mode", `want "lifo" or "fifo", got %q`, a.PreemptionMode)
		},
		func() *ArgError {
			if a.KVBytesPerToken != nil && *a.KVBytesPerToken < 0 {
				return argErr("kv_bytes_per_token", "must be ≥ 0, got %d", *a.KVBytesPerToken)
			}
			return nil
		},
		func() *ArgError {
			if b := a.KVTransferBandwidth; b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0) || *b < 0) {
				return argErr("kv_transfer_bandwidth", "must be a finite number of GB/s ≥ 0 (0 disables the transfer delay), got %g", *b)
			}
			return nil
		},
		func() *ArgError {
			if b := a.BandwidthG2ToG1; b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0) || *b < 0) {
				return argErr("bandwidth_g2_to_g1_gbps", "must be a finite number of GB/s ≥ 0 (0 makes onboarding take no time), got %g", *b)
			}
			if a.NumG2Blocks < 0 || a.NumG2Blocks > math.MaxInt32 {
				return argErr("num_g2_blocks", "must be between 0 and %d, got %d", math.MaxInt32, a.NumG2Blocks)
			}
			if a.NumG2Blocks > 0 && a.EngineType == EngineSGLang {
				return argErr("num_g2_blocks", "the host offload tier is modeled for the vllm and trtllm engines only; remove it or set it to 0 for sglang")
			}
			for _, b := range []struct {
				key, what string
				bw        *float64
			}{
				{"bandwidth_g3_to_g2_gbps", "staging", a.BandwidthG3ToG2},
				{"bandwidth_g4_to_g2_gbps", "staging", a.BandwidthG4ToG2},
				{"bandwidth_g1_to_g2_gbps", "offloading", a.BandwidthG1ToG2},
				{"bandwidth_g2_to_g3_gbps", "offloading", a.BandwidthG2ToG3},
				{"bandwidth_g2_to_g4_gbps", "offloading", a.BandwidthG2ToG4},
			} {
				if b.bw != nil && (math.IsNaN(*b.bw) || math.IsInf(*b.bw, 0) || *b.bw < 0) {
					return argErr(b.key, "must be a finite number of GB/s ≥ 0 (0 makes %s take no time), got %g", b.what, *b.bw)
				}
			}
			if a.OffloadBatchSize < 0 || a.OffloadBatchSize > math.MaxInt32 {
				return argErr("offload_batch_size", "must be between 0 and %d, got %d", math.MaxInt32, a.OffloadBatchSize)
			}
			if a.NumG3Blocks < 0 || a.NumG3Blocks > math.MaxInt32 {
				return argErr("num_g3_blocks", "must be between 0 and %d, got %d", math.MaxInt32, a.NumG3Blocks)
			}
			// KVBM stages the lower tiers through the host tier: without
			// it they have nothing to copy from.
			if a.NumG3Blocks > 0 && a.NumG2Blocks == 0 {
				return argErr("num_g3_blocks", "the disk (G3) tier is filled from and read through the host tier; set num_g2_blocks above 0 or num_g3_blocks to 0")
			}
			if a.EnableG4Storage && a.NumG2Blocks == 0 {
				return argErr("enable_g4_storage", "object storage (G4) is filled from and read through the host tier; set num_g2_blocks above 0 or enable_g4_storage to false")
			}
			if a.NumG2Blocks > 0 && !a.EnablePrefixCaching {
				// The tier keeps what the prefix cache evicts: without the
				// cache it would hold nothing and change no figure.
				return argErr("num_g2_blocks", "the host offload tier keeps blocks the prefix cache evicts, and enable_prefix_caching is false; enable prefix caching or set num_g2_blocks to 0")
			}
			return nil
		},
		func() *ArgError {
			switch a.KVTransferTimingMode {
			case TransferFullPrompt, TransferDestinationMissing:
				return nil
			}
			return argErr("kv_transfer_timing_mode", `want "full_prompt" or "destination_missing", got %q`, a.KVTransferTimingMode)
		},
		func() *ArgError {
			if t := a.KVTransferAbortTimeoutMs; t != nil && *t < 0 {
				return argErr("kv_transfer_abort_timeout_ms", "must be ≥ 0 modeled ms (0 or null: no abort timeout), got %d", *t)
			}
			return nil
		},
		func() *ArgError {
			if a.HandoffSessionTimeoutMs < 1 {
				return argErr("handoff_session_timeout_ms", "must be at least 1 modeled ms, got %d; it is what reclaims held KV, so use a large value rather than 0", a.HandoffSessionTimeoutMs)
			}
			return nil
		},
		a.validateSGLang,
		a.validateTRTLLM,
		a.validateTimingModel,
	}
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

func (a Args) validateTimingModel() *ArgError {
	tm := a.TimingModel
	if tm == nil {
		return nil
	}
	okMs := func(f *float64) bool { return f != nil && !math.IsNaN(*f) && !math.IsInf(*f, 0) && *f >= 0 }
	switch tm.Type {
	case TimingPolynomial, TimingInterpolated, TimingFixed:
	default:
		return argErr("timing_model.type", `want "polynomial", "interpolated" or "fixed", got %q`, tm.Type)
	}
	if tm.Type == TimingFixed {
		if !okMs(tm.PrefillMs) {
			return argErr("timing_model.prefill_ms", "the fixed model needs a finite latency ≥ 0 ms")
		}
		if !okMs(tm.DecodeMs) {
			return argErr("timing_model.decode_ms", "the fixed model needs a finite latency ≥ 0 ms")
		}
	} else if tm.PrefillMs != nil || tm.DecodeMs != nil {
		return argErr("timing_model", "prefill_ms and decode_ms belong to the \"fixed\" model, not %q", tm.Type)
	}
	switch {
	case tm.Type == TimingInterpolated && a.PlannerProfileData == "":
		return argErr("timing_model", `"interpolated" needs planner_profile_data, the profile to interpolate`)
	case tm.Type != TimingInterpolated && a.PlannerProfileData != "":
		return argErr("timing_model", "%q contradicts planner_profile_data, which selects the interpolated model; drop one", tm.Type)
	}
	return nil
}

func (a Args) validateTRTLLM() *ArgError {
	if a.TRTLLM == nil {
		return nil
	}
	switch a.TRTLLM.CapacitySchedulerPolicy {
	case TRTLLMGuaranteedNoEvict, TRTLLMMaxUtilization:
		return nil
	}
	return argErr("trtllm.capacity_scheduler_policy", `want %q or %q, got %q`, TRTLLMGuaranteedNoEvict, TRTLLMMaxUtilization, a.TRTLLM.CapacitySchedulerPolicy)
}

func (a Args) validateSGLang() *ArgError {
	sg := a.SGLang
	if sg == nil {
		if a.EngineType == EngineSGLang {
			return argErr("sglang", "must be set for engine_type \"sglang\" (start from DefaultSGLangArgs with page_size = block_size)")
		}
		return nil
	}
	switch sg.SchedulePolicy {
	case SGLangPolicyFIFO, SGLangPolicyLPM:
	default:
		return argErr("sglang.schedule_policy", `want "fifo" or "lpm", got %q`, sg.SchedulePolicy)
	}
	for _, c := range []struct {
		field string
		n     int
	}{
		{"sglang.page_size", sg.PageSize},
		{"sglang.max_prefill_tokens", sg.MaxPrefillTokens},
		{"sglang.chunked_prefill_size", sg.ChunkedPrefillSize},
		{"sglang.clip_max_new_tokens", sg.ClipMaxNewTokens},
	} {
		if err := argAtLeast(c.field, c.n, 1, ""); err != nil {
			return err
		}
	}
	if c := sg.ScheduleConservativeness; !(c >= 0 && c <= 1) {
		return argErr("sglang.schedule_conservativeness", "must be between 0 and 1, as in Dynamo, got %g (SGLang itself accepts more, but Dynamo's mocker does not, and mocker keeps its range)", c)
	}
	if err := argOptAtLeast("sglang.max_running_requests", sg.MaxRunningRequests, ""); err != nil {
		return err
	}
	if a.EngineType != EngineSGLang {
		return nil
	}
	if sg.PageSize != a.BlockSize {
		return argErr("sglang.page_size", "must equal block_size (%d) for engine_type \"sglang\", got %d; set one of them or both to the same value", a.BlockSize, sg.PageSize)
	}
	if sg.ChunkedPrefillSize%a.BlockSize != 0 {
		return argErr("sglang.chunked_prefill_size", "must be a multiple of block_size (%d), got %d", a.BlockSize, sg.ChunkedPrefillSize)
	}
	return nil
}

func argAtLeast(field string, n, lo int, hint string) *ArgError {
	if n < lo {
		return argErr(field, "must be at least %d%s, got %d", lo, hint, n)
	}
	return nil
}

func argOptAtLeast(field string, n *int, hint string) *ArgError {
	if n == nil {
		return nil
	}
	return argAtLeast(field, *n, 1, hint)
}
