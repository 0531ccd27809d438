package engine

// ArgSupport says what mocker does with an engine argument it accepts.
type ArgSupport string

// Kinds of support. The parser's unknown-key error lists ArgModeled keys as
// the valid keys and the others as "also accepted from Dynamo".
const (
	// ArgModeled keys change what the mock worker does.
	ArgModeled ArgSupport = "modeled"
	// ArgIgnored keys are Dynamo's deployment knobs: type-checked, then
	// ignored, so a config copied from Dynamo loads.
	ArgIgnored ArgSupport = "ignored"
	// ArgOffOnly keys are Dynamo features mocker does not model: accepted
	// only at their "off" value, since ignoring them would misstate results.
	ArgOffOnly ArgSupport = "off only"
)

// ArgDoc describes one engine argument for people: `mocker args`,
// docs/args.md. ArgDocs holds one per key the parser accepts.
type ArgDoc struct {
	// Key is the JSON key, dotted inside the sglang object
	// ("sglang.page_size").
	Key string
	// Aliases are other keys the parser reads as this one.
	Aliases []string
	// Type is what the key accepts, e.g. `integer ≥ 1` or `"lifo" | "fifo"`.
	Type string
	// Default is the value when the key is absent, as JSON where it is one
	// value (16384, "vllm", true), or prose ("none", "vllm 64, sglang 1").
	Default string
	// Support says what mocker does with the key.
	Support ArgSupport
	// Dynamo says whether Dynamo's MockEngineArgs has the key: "yes", or
	// "no" / "yes, but" followed by how it differs.
	Dynamo string
	// Meaning is one or two sentences on what the key does.
	Meaning string
}

// ArgDocs documents every key ParseArgs accepts, modeled keys first in the
// order of the Args fields, then the sglang object's keys, then the Dynamo
// keys mocker only accepts. A test holds it to the parser: a key accepted
// without an entry, or an entry for a key the parser rejects, fails it.
var ArgDocs = []ArgDoc{
	{Key: "engine_type", Type: `"vllm" | "sglang" | "trtllm"`, Default: `"vllm"`, Support: ArgModeled,
		Dynamo:  "yes",
		Meaning: "The scheduler model. vLLM hands KV off source-first (prefill holds, decode claims later); SGLang destination-first unless sglang.optimistic_prefill; TRT-LLM is the vLLM core under the trtllm object's capacity policy, source-first."},
	{Key: "num_gpu_blocks", Type: "integer ≥ 1", Default: "16384", Support: ArgModeled, Dynamo: "yes",
		Meaning: "KV pool size in blocks; held, reserved and active KV all come out of it."},
	{Key: "block_size", Type: "integer ≥ 0, 0 = by engine", Default: "vllm 64, trtllm 32, sglang page_size or 1", Support: ArgModeled,
		Dynamo:  "yes",
		Meaning: "Tokens per KV block."},
	{Key: "max_model_len", Type: "integer ≥ 1 (vllm and trtllm only)", Default: "none", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Prompts at or above it are rejected; generation stops there (the result is truncated)."},
	{Key: "max_num_seqs", Type: "integer ≥ 1, null = unbounded", Default: "256", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Cap on the running set. On a decode worker it bounds the handoffs admitted at once: the usual bottleneck that makes prefill holds wait."},
	{Key: "max_num_batched_tokens", Type: "integer ≥ 1, null = unbounded", Default: "8192", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Token budget of one forward pass."},
	{Key: "enable_prefix_caching", Type: "boolean", Default: "true", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Off: every block gets a random hash, so nothing is shared and no KV events are sent."},
	{Key: "enable_chunked_prefill", Type: "boolean", Default: "true", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Off: a prompt waits until it fits the remaining budget of one pass."},
	{Key: "speedup_ratio", Type: "number ≥ 0, 0 = no scaling", Default: "1", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Modeled time runs this many times faster than wall time. Reported times stay modeled."},
	{Key: "decode_speedup_ratio", Type: "number > 0", Default: "1", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Extra divisor of decode time only (speculative decoding)."},
	{Key: "dp_size", Type: "integer ≥ 1", Default: "1", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Data-parallel ranks per worker, each its own scheduler and pool of num_gpu_blocks; the router places requests on (worker, rank) pairs and indexes KV per pair."},
	{Key: "worker_type", Type: `"aggregated" | "prefill" | "decode"`, Default: `"aggregated"`, Support: ArgModeled, Dynamo: "yes",
		Meaning: "The part of serving the worker plays."},
	{Key: "is_prefill", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "yes (legacy)",
		Meaning: `Legacy: true means worker_type "prefill".`},
	{Key: "is_decode", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "yes (legacy)",
		Meaning: `Legacy: true means worker_type "decode".`},
	{Key: "preemption_mode", Type: `"lifo" | "fifo"`, Default: `"lifo"`, Support: ArgModeled, Dynamo: "yes",
		Meaning: "Which running request a vLLM worker preempts when its pool runs out."},
	{Key: "kv_bytes_per_token", Aliases: []string{"kv_cache_bytes_per_token", "kv_transfer_bytes_per_token"},
		Type: "integer ≥ 0", Default: "none", Support: ArgModeled, Dynamo: "yes (Dynamo main: kv_cache_bytes_per_token, alias kv_transfer_bytes_per_token)",
		Meaning: "KV footprint of one token. With kv_transfer_bandwidth it gives the modeled transfer time; unset, transfers take no time."},
	{Key: "kv_transfer_bandwidth", Type: "number ≥ 0 (GB/s), 0 = no delay", Default: "none", Support: ArgModeled,
		Dynamo:  "yes (its CLI defaults it to 64)",
		Meaning: "Transfer bandwidth in GB/s (1e9 bytes/s): a transfer takes tokens × kv_bytes_per_token / bandwidth."},
	{Key: "num_g2_blocks", Type: "integer ≥ 0 (vllm and trtllm only)", Default: "0 (no tier)", Support: ArgModeled, Dynamo: "yes (KVBM G2)",
		Meaning: "Host (G2) offload tier in blocks: blocks the GPU prefix cache evicts are kept there in LRU order, and a prefix hit on them is copied back instead of recomputed. Needs enable_prefix_caching."},
	{Key: "bandwidth_g2_to_g1_gbps", Type: "number ≥ 0 (GB/s), 0 = no onboard time", Default: "none: 14 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Host-to-GPU bandwidth: onboarding n blocks adds n × block_size × kv_bytes_per_token / bandwidth to the prefill pass that reads them. Without kv_bytes_per_token onboarding takes no time."},
	{Key: "bandwidth_g1_to_g2_gbps", Type: "number ≥ 0 (GB/s), 0 = no offload time", Default: "none: 14 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "GPU-to-host bandwidth: a block the GPU pool evicts reaches the host tier (its hits, its CPU Stored event) when its batch's copy of block_size × kv_bytes_per_token bytes per block lands, the batches under way sharing the bandwidth; the passes are not slowed. Without kv_bytes_per_token, or at 0, it is there at once."},
	{Key: "bandwidth_g2_to_g3_gbps", Type: "number ≥ 0 (GB/s), 0 = no copy time", Default: "none: 7 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Host-to-disk bandwidth: a block the host tier takes in reaches the disk tier (its hits, its DISK Stored event) when its batch's copy lands, one batch under way at a time. Without kv_bytes_per_token, or at 0, it is there at once."},
	{Key: "bandwidth_g2_to_g4_gbps", Type: "number ≥ 0 (GB/s), 0 = no copy time", Default: "none: 4 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Host-to-object-storage bandwidth: as bandwidth_g2_to_g3_gbps for object storage (EXTERNAL), with up to offload_batch_size batches under way sharing it."},
	{Key: "offload_batch_size", Type: "integer ≥ 0, 0 = 32", Default: "none: 32", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Offload batching: the blocks one allocation evicts are copied to the host tier in batches of at most this many, at most this many batches under way at once; a block is in the tier when its batch lands. The copies on to disk and object storage are batched the same way. Has effect when the copies take time."},
	{Key: "num_g3_blocks", Type: "integer ≥ 0 (needs num_g2_blocks)", Default: "0 (no tier)", Support: ArgModeled, Dynamo: "yes (KVBM G3, shared by the workers of a process)",
		Meaning: "Disk (G3) tier in blocks, one per worker: each block the host tier takes in from the GPU pool is copied on to it (LRU), and a prefix hit on it past the host tier's is staged back through the host tier."},
	{Key: "enable_g4_storage", Type: "boolean (needs num_g2_blocks)", Default: "false (no tier)", Support: ArgModeled, Dynamo: "yes (KVBM G4, shared by the workers of a process)",
		Meaning: "Object storage (G4) tier, one per worker, unbounded: each block the host tier takes in from the GPU pool is copied on to it, and a prefix hit on it past the host and disk tiers' is staged back through the host tier."},
	{Key: "bandwidth_g3_to_g2_gbps", Type: "number ≥ 0 (GB/s), 0 = no staging time", Default: "none: 7 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Disk-to-host bandwidth: staging n disk blocks adds n × block_size × kv_bytes_per_token / bandwidth to the pass that reads them, on top of their host-to-GPU copy."},
	{Key: "bandwidth_g4_to_g2_gbps", Type: "number ≥ 0 (GB/s), 0 = no staging time", Default: "none: 4 GB/s", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Object-storage-to-host bandwidth, as bandwidth_g3_to_g2_gbps for blocks found in object storage."},
	{Key: "kv_transfer_timing_mode", Type: `"full_prompt" | "destination_missing"`, Default: `"full_prompt"`, Support: ArgModeled, Dynamo: "yes",
		Meaning: "Charge a transfer for the whole prompt, or only for the blocks the decode worker does not have."},
	{Key: "reserve_takes_slot", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "no",
		Meaning: "A decode reservation also takes a max_num_seqs slot until it activates (mocker's former rule). By default a reservation takes KV only, as in Dynamo and vLLM."},
	{Key: "dynamo_compat", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "no",
		Meaning: "Reproduce Dynamo main's numbers where mocker differs on purpose (unclamped SGLang decode utilisation, integer mean prompt length, SGLang ratio re-estimate and priority order, reserved destinations counted as waiting, a prefill worker generating max_tokens, SGLang's sampled token taking its KV slot at once, SGLang admitting what its budget allows instead of refusing a request that can never complete); see docs/fidelity.md."},
	{Key: "timing_model", Type: `"polynomial" | "interpolated" | {type: "fixed", prefill_ms, decode_ms}`, Default: `"polynomial" (interpolated with planner_profile_data)`,
		Support: ArgModeled, Dynamo: "yes",
		Meaning: "How pass times are modeled: Dynamo's polynomial, interpolation over profile data, or fixed latencies per prefill and decode step."},
	{Key: "kv_transfer_abort_timeout_ms", Type: "integer ≥ 0 (modeled ms), 0 = none", Default: "none", Support: ArgModeled,
		Dynamo:  "no (proposed in Dynamo PR #10557, not merged)",
		Meaning: "A prefill hold that no decode claimed within this long after it started is aborted and its KV freed."},
	{Key: "handoff_session_timeout_ms", Type: "integer ≥ 1 (modeled ms)", Default: "300000", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Upper bound of every handoff session: a hold is reclaimed after it even without an abort timeout."},
	{Key: "router_load_includes_held", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "no (mocker's)",
		Meaning: "Count held blocks in the load the router sees. Off, the router sees a holding prefill worker as emptier than its pool is."},
	{Key: "planner_profile_data", Type: "path of a profile table, NPZ file or profiler results directory", Default: "none", Support: ArgModeled,
		Dynamo:  "yes (both NPZ layouts and the older raw-data JSON; JSON tables are mocker's)",
		Meaning: "Interpolated timing from profile data instead of the polynomial model: a JSON table, Dynamo's mocker-format NPZ (prefill_isl, prefill_ttft_ms, decode_active_kv_tokens, decode_context_length, decode_itl), or the profiler's results directory (selected_prefill_interpolation/raw_data.npz and selected_decode_interpolation/raw_data.npz, or the older prefill_raw_data.json and decode_raw_data.json)."},
	{Key: "sglang", Type: "object", Default: "SGLang's defaults", Support: ArgModeled, Dynamo: "yes",
		Meaning: "The SGLang knobs below, read only when engine_type is sglang."},
	{Key: "trtllm", Type: `{"capacity_scheduler_policy": "guaranteed_no_evict" | "max_utilization"}`, Default: "guaranteed_no_evict", Support: ArgModeled,
		Dynamo:  "yes, guaranteed_no_evict only",
		Meaning: "TRT-LLM's capacity scheduler, read only when engine_type is trtllm. guaranteed_no_evict admits a request only when the pool can hold its prompt and all its max_tokens beside what every running request may still take (max_tokens is cut to the pool's room after the prompt), and never preempts; max_utilization admits on the blocks needed now and preempts the newest running request, as vllm does."},

	{Key: "sglang.schedule_policy", Type: `"fifo" | "fcfs" | "lpm"`, Default: `"fifo"`, Support: ArgModeled, Dynamo: "yes",
		Meaning: "Waiting-queue order: arrival (fcfs is read as fifo), or longest prefix match first."},
	{Key: "sglang.page_size", Type: "integer ≥ 1, equal to block_size", Default: "block_size", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Radix cache page in tokens."},
	{Key: "sglang.max_prefill_tokens", Type: "integer ≥ 1", Default: "16384", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Prompt tokens admitted in one extend pass."},
	{Key: "sglang.chunked_prefill_size", Type: "integer ≥ 1, a multiple of block_size", Default: "8192, rounded down to a multiple of block_size", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Largest prompt chunk computed in one pass."},
	{Key: "sglang.clip_max_new_tokens", Type: "integer ≥ 1", Default: "4096", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Cap on the future output tokens admission reserves per running request."},
	{Key: "sglang.schedule_conservativeness", Type: "number ≥ 0", Default: "1", Support: ArgModeled, Dynamo: "yes",
		Meaning: "Scales the new-token ratio admission reserves for running requests' growth."},
	{Key: "sglang.max_running_requests", Type: "integer ≥ 1", Default: "none", Support: ArgModeled, Dynamo: "yes (Dynamo PR #10831)",
		Meaning: "Cap on the running set; unset, max_num_seqs applies."},
	{Key: "sglang.optimistic_prefill", Type: "boolean", Default: "false", Support: ArgModeled, Dynamo: "no (mocker's)",
		Meaning: "A disaggregated SGLang prefill computes before the decode side reserved, so it can strand KV as vLLM does."},

	{Key: "has_perf_model", Type: "any", Default: "none", Support: ArgIgnored, Dynamo: "yes, ignored there too",
		Meaning: "Accepted and ignored."},
	{Key: "startup_time", Type: "number ≥ 0 (s)", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Delay before the worker registers; workers start at once here."},
	{Key: "enable_local_indexer", Type: "boolean", Default: "false", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Deployment setting of Dynamo's KV indexer; the cluster's router indexes KV events itself."},
	{Key: "bootstrap_port", Type: "integer 0..65535", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "The cluster assigns each prefill worker's transfer address."},
	{Key: "zmq_kv_events_port", Type: "integer 0..65535", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "vLLM-native ZMQ event publisher; ignored as an engine arg: mocker serve --kv-events publishes each worker rank's events."},
	{Key: "zmq_replay_port", Type: "integer 0..65535", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "vLLM-native ZMQ replay endpoint; ignored as an engine arg: see mocker serve --kv-events-replay."},
	{Key: "router_queue_policy", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes (replay only)",
		Meaning: "Used by Dynamo's offline replay only."},
	{Key: "response_replay_trace_path", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Output token ids are random here, not replayed."},
	{Key: "reasoning", Type: "object", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Thinking-token shaping of output ids; output token ids are random here."},
	{Key: "gpu_memory_utilization", Type: "number 0..1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Only used to estimate num_gpu_blocks; give num_gpu_blocks."},
	{Key: "mem_fraction_static", Type: "number 0..1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Only used to estimate num_gpu_blocks; give num_gpu_blocks."},
	{Key: "free_gpu_memory_fraction", Type: "number 0..1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "Only used to estimate num_gpu_blocks; give num_gpu_blocks."},
	{Key: "aic_system", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_systems_path", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_backend_version", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_model_path", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_tp_size", Type: "integer ≥ 1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_moe_tp_size", Type: "integer ≥ 1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_moe_ep_size", Type: "integer ≥ 1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_attention_dp_size", Type: "integer ≥ 1", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_gemm_dtype", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_moe_dtype", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_fmha_dtype", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_kv_cache_dtype", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_comm_dtype", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "AIConfigurator setting; AIConfigurator timing is not modeled."},
	{Key: "aic_nextn_accept_rates", Type: "string", Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "MTP accept rates; MTP is not modeled (see aic_nextn)."},
	{Key: "aic_mtp_seed", Type: "integer ≥ 0", Default: "42", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "MTP sampling seed; MTP is not modeled (see aic_nextn)."},
	{Key: "g1_backend", Type: `"kvbm" | "native"`, Default: "none", Support: ArgIgnored, Dynamo: "yes",
		Meaning: "KVBM's GPU pool backend; one GPU pool model is used either way."},
	{Key: "aic_backend", Type: "absent: any string is rejected", Default: "none", Support: ArgOffOnly, Dynamo: "yes",
		Meaning: "AIConfigurator timing is not modeled: rejected when set. Give a profile table in planner_profile_data instead."},
	{Key: "aic_nextn", Type: "absent: any integer is rejected", Default: "none", Support: ArgOffOnly, Dynamo: "yes",
		Meaning: "MTP draft bursts are not modeled: rejected when set. Use decode_speedup_ratio for faster decode."},
}
