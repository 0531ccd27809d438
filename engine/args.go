package engine

import "math"

// EngineType picks the scheduler model.
type EngineType string //nolint:revive // named after the engine_type key of MockEngineArgs

// Engine types.
const (
	EngineVLLM   EngineType = "vllm"
	EngineSGLang EngineType = "sglang"
	// EngineTRTLLM runs the vLLM scheduler core under TensorRT-LLM's
	// capacity scheduler policy (TRTLLMArgs), as Dynamo's mocker does.
	EngineTRTLLM EngineType = "trtllm"
)

// WorkerType says which part of serving a worker plays.
type WorkerType string

// Worker types.
const (
	WorkerAggregated WorkerType = "aggregated"
	WorkerPrefill    WorkerType = "prefill"
	WorkerDecode     WorkerType = "decode"
)

// PreemptionMode picks the running request a vLLM worker evicts when its pool
// is exhausted.
type PreemptionMode string

// Preemption modes.
const (
	PreemptLIFO PreemptionMode = "lifo"
	PreemptFIFO PreemptionMode = "fifo"
)

// TransferTimingMode says which tokens a KV transfer is charged for.
type TransferTimingMode string

// Transfer timing modes.
const (
	TransferFullPrompt         TransferTimingMode = "full_prompt"
	TransferDestinationMissing TransferTimingMode = "destination_missing"
)

// SGLang schedule policies. Dynamo's "fcfs" is read as SGLangPolicyFIFO.
const (
	SGLangPolicyFIFO = "fifo"
	SGLangPolicyLPM  = "lpm"
)

// TensorRT-LLM capacity scheduler policies (TRTLLMArgs.CapacitySchedulerPolicy).
const (
	// TRTLLMGuaranteedNoEvict admits a request only when the pool can hold
	// it to its last token beside what every running request may still
	// take, and never preempts.
	TRTLLMGuaranteedNoEvict = "guaranteed_no_evict"
	// TRTLLMMaxUtilization admits on the blocks a request needs now and
	// pauses the newest running request when the pool runs dry: the vLLM
	// core's rules.
	TRTLLMMaxUtilization = "max_utilization"
)

// TRTLLMArgs are the TensorRT-LLM knobs (Dynamo's `trtllm` sub-object).
// They take effect only when engine_type is trtllm.
type TRTLLMArgs struct {
	// CapacitySchedulerPolicy is TRTLLMGuaranteedNoEvict (the default, and
	// the only policy Dynamo's mocker accepts) or TRTLLMMaxUtilization.
	CapacitySchedulerPolicy string `json:"capacity_scheduler_policy"`
}

// DefaultTRTLLMArgs returns TensorRT-LLM's default capacity policy.
func DefaultTRTLLMArgs() TRTLLMArgs {
	return TRTLLMArgs{CapacitySchedulerPolicy: TRTLLMGuaranteedNoEvict}
}

// SGLangArgs are the SGLang-only knobs (Dynamo's `sglang` sub-object) plus
// optimistic_prefill. They take effect only when engine_type is sglang.
type SGLangArgs struct {
	// SchedulePolicy orders the waiting queue: SGLangPolicyFIFO keeps arrival
	// order, SGLangPolicyLPM prefers the longest radix prefix match.
	SchedulePolicy string `json:"schedule_policy"`
	// PageSize is the radix cache page in tokens; it always equals the
	// worker's block_size once parsed.
	PageSize int `json:"page_size"`
	// MaxPrefillTokens caps the prompt tokens admitted in one extend pass.
	MaxPrefillTokens int `json:"max_prefill_tokens"`
	// ChunkedPrefillSize is the largest prompt chunk computed in one pass, a
	// multiple of PageSize.
	ChunkedPrefillSize int `json:"chunked_prefill_size"`
	// ClipMaxNewTokens caps how many future output tokens admission reserves
	// for each running request.
	ClipMaxNewTokens int `json:"clip_max_new_tokens"`
	// ScheduleConservativeness, in [0, 1] as Dynamo allows, scales the
	// initial new-token ratio admission uses to reserve room for running
	// requests' growth: the ratio starts at 0.7 × it.
	ScheduleConservativeness float64 `json:"schedule_conservativeness"`
	// MaxRunningRequests caps the running set; nil leaves max_num_seqs in
	// charge.
	MaxRunningRequests *int `json:"max_running_requests,omitempty"`
	// OptimisticPrefill makes a disaggregated SGLang prefill compute before
	// the decode side has reserved, so it can strand KV like vLLM does.
	OptimisticPrefill bool `json:"optimistic_prefill"`
}

// Args configures one mock worker. JSON keys and defaults follow Dynamo's
// MockEngineArgs; durations are modeled time. Build one with DefaultArgs or
// ParseArgs (which resolve engine-dependent defaults and validate), never as
// a zero value; check a hand-built one with Validate.
type Args struct {
	// EngineType picks the scheduler model: EngineVLLM, EngineSGLang or
	// EngineTRTLLM.
	EngineType EngineType `json:"engine_type"`
	// NumGPUBlocks is the KV pool size in blocks.
	NumGPUBlocks int `json:"num_gpu_blocks"`
	// BlockSize is the number of tokens per KV block (vLLM 64, TRT-LLM 32, SGLang the
	// page size, 1 by default).
	BlockSize int `json:"block_size"`
	// MaxModelLen (vLLM only) rejects prompts at or above it and stops
	// generation there. Nil: no limit.
	MaxModelLen *int `json:"max_model_len,omitempty"`
	// MaxNumSeqs caps the running set. Nil: unbounded.
	MaxNumSeqs *int `json:"max_num_seqs"`
	// MaxNumBatchedTokens is the token budget of one pass. Nil: unbounded.
	MaxNumBatchedTokens *int `json:"max_num_batched_tokens"`
	// EnablePrefixCaching off gives every block a random hash: no sharing and
	// no KV events.
	EnablePrefixCaching bool `json:"enable_prefix_caching"`
	// EnableChunkedPrefill off makes a prompt wait until it fits the
	// remaining budget of one pass.
	EnableChunkedPrefill bool `json:"enable_chunked_prefill"`
	// SpeedupRatio divides modeled time to get wall time in the cluster's
	// paced loop; 0 means no scaling. Reported times stay modeled.
	SpeedupRatio float64 `json:"speedup_ratio"`
	// DecodeSpeedupRatio divides decode time only (speculative decoding);
	// 0 means no extra speedup, as in Dynamo.
	DecodeSpeedupRatio float64 `json:"decode_speedup_ratio"`
	// DPSize is the number of data-parallel ranks of the worker, each its
	// own scheduler and KV pool of NumGPUBlocks blocks. A Worker models one
	// rank; a cluster runs DPSize of them under one worker name.
	DPSize int `json:"dp_size"`
	// WorkerType is the part of serving this worker plays.
	WorkerType WorkerType `json:"worker_type"`
	// PreemptionMode picks the vLLM preemption victim.
	PreemptionMode PreemptionMode `json:"preemption_mode"`

	// KVBytesPerToken is the KV footprint of one token, for transfer timing.
	// Nil: transfers take no modeled time.
	KVBytesPerToken *int `json:"kv_bytes_per_token,omitempty"`
	// KVTransferBandwidth in GB/s (1e9 bytes/s). Nil or 0: transfers take no
	// modeled time.
	KVTransferBandwidth *float64 `json:"kv_transfer_bandwidth,omitempty"`
	// NumG2Blocks sizes the host (G2) offload tier of a vLLM or TRT-LLM
	// worker: blocks the GPU pool's prefix cache evicts are kept there, in
	// LRU order, and a prefix hit on them is copied back instead of
	// recomputed. 0: no tier.
	NumG2Blocks int `json:"num_g2_blocks,omitempty"`
	// BandwidthG2ToG1 in GB/s (1e9 bytes/s) times copying a block back from
	// the host tier: block_size × kv_bytes_per_token / bandwidth. Nil:
	// DefaultBandwidthG2ToG1. 0, or kv_bytes_per_token unset: onboarding
	// takes no modeled time.
	BandwidthG2ToG1 *float64 `json:"bandwidth_g2_to_g1_gbps,omitempty"`
	// BandwidthG1ToG2 in GB/s times the copy of an evicted block into the
	// host tier: block_size × kv_bytes_per_token / bandwidth, the batches
	// under way sharing it. Nil: DefaultBandwidthG1ToG2. 0, or
	// kv_bytes_per_token unset: an evicted block is in the tier at once.
	BandwidthG1ToG2 *float64 `json:"bandwidth_g1_to_g2_gbps,omitempty"`
	// OffloadBatchSize is the most blocks one offload transfer carries,
	// and the most transfers under way at once. 0: DefaultOffloadBatchSize.
	OffloadBatchSize int `json:"offload_batch_size,omitempty"`
	// NumG3Blocks sizes the disk (G3) tier below the host tier: each block
	// the host tier takes in from the GPU pool is copied on to it, an LRU
	// of this many blocks, and a prefix hit past the host tier's is staged
	// back through the host tier. 0: no tier. Needs NumG2Blocks.
	NumG3Blocks int `json:"num_g3_blocks,omitempty"`
	// EnableG4Storage adds object storage (G4) below the host tier: an
	// unbounded copy of each block the host tier takes in from the GPU
	// pool, found after the host and disk tiers. Needs NumG2Blocks.
	EnableG4Storage bool `json:"enable_g4_storage,omitempty"`
	// BandwidthG3ToG2 and BandwidthG4ToG2 in GB/s time staging a block
	// from disk or object storage into the host tier, before it is
	// onboarded as a host block is. Nil: DefaultBandwidthG3ToG2,
	// DefaultBandwidthG4ToG2. 0, or kv_bytes_per_token unset: no time.
	BandwidthG3ToG2 *float64 `json:"bandwidth_g3_to_g2_gbps,omitempty"`
	BandwidthG4ToG2 *float64 `json:"bandwidth_g4_to_g2_gbps,omitempty"`
	// BandwidthG2ToG3 and BandwidthG2ToG4 in GB/s time the copy of a block
	// the host tier took in on to disk or object storage, as
	// BandwidthG1ToG2 times its way into the host tier (the disk link
	// carries one batch at a time). Nil: DefaultBandwidthG2ToG3,
	// DefaultBandwidthG2ToG4. 0, or kv_bytes_per_token unset: the copy is
	// there at once.
	BandwidthG2ToG3 *float64 `json:"bandwidth_g2_to_g3_gbps,omitempty"`
	BandwidthG2ToG4 *float64 `json:"bandwidth_g2_to_g4_gbps,omitempty"`
	// KVTransferTimingMode says which prompt tokens a transfer is charged for.
	KVTransferTimingMode TransferTimingMode `json:"kv_transfer_timing_mode"`
	// KVTransferAbortTimeoutMs ends a source hold that no decode claimed
	// within this many modeled ms of the hold starting. Nil (or 0, which
	// ParseArgs stores as nil): no abort timeout. Read it with AbortTimeoutMs.
	KVTransferAbortTimeoutMs *int64 `json:"kv_transfer_abort_timeout_ms,omitempty"`
	// HandoffSessionTimeoutMs bounds every handoff session (modeled ms), so a
	// hold is reclaimed even without an abort timeout. At least 1.
	HandoffSessionTimeoutMs int64 `json:"handoff_session_timeout_ms"`
	// RouterLoadIncludesHeld makes the router-facing load count held blocks.
	RouterLoadIncludesHeld bool `json:"router_load_includes_held"`
	// ReserveTakesSlot (mocker's, default false) brings back mocker's
	// former rule that a destination reservation takes a max_num_seqs slot
	// from reservation to completion. Dynamo and vLLM reserve KV only; see
	// docs/fidelity.md.
	ReserveTakesSlot bool `json:"reserve_takes_slot"`

	// PlannerProfileData is the path of profile data for perf.FromProfile:
	// a JSON table, a mocker-format NPZ or a profiler results directory.
	// Empty: the polynomial model.
	PlannerProfileData string `json:"planner_profile_data,omitempty"`
	// TimingModel picks the timing model as Dynamo main's timing_model
	// does. Nil: polynomial, or interpolated when PlannerProfileData is
	// set.
	TimingModel *TimingModelArgs `json:"timing_model,omitempty"`

	// DynamoCompat makes the worker reproduce Dynamo main's numbers where
	// mocker differs from it on purpose (docs/fidelity.md): the polynomial
	// decode model's utilisation unclamped (and SGLang's logical KV not
	// capped at the pool), integer mean prompt, prefix and context lengths
	// for the timing model, and SGLang's new-token ratio re-estimated after
	// a retraction instead of reset and decayed on extend passes too,
	// SGLang's waiting queue ordered by Request.Priority, reserved
	// destinations counted in Metrics.Waiting, and a vLLM prefill worker
	// generating a request's MaxTokens, not only its first token.
	DynamoCompat bool `json:"dynamo_compat"`

	// SGLang holds the SGLang knobs. ParseArgs always fills it for an sglang
	// engine; it is ignored for vLLM.
	SGLang *SGLangArgs `json:"sglang,omitempty"`
	// TRTLLM holds the TensorRT-LLM knobs. ParseArgs always fills it for a
	// trtllm engine; nil there means DefaultTRTLLMArgs.
	TRTLLM *TRTLLMArgs `json:"trtllm,omitempty"`
}

// TimingModelType names a timing model, as Dynamo's timing_model type does.
type TimingModelType string

// Timing model types.
const (
	// TimingPolynomial is Dynamo's fitted polynomial (perf.Polynomial).
	TimingPolynomial TimingModelType = "polynomial"
	// TimingInterpolated interpolates the profile in planner_profile_data
	// (perf.Interpolated); it requires that path.
	TimingInterpolated TimingModelType = "interpolated"
	// TimingFixed costs every prefill pass prefill_ms and every decode step
	// decode_ms (perf.Fixed).
	TimingFixed TimingModelType = "fixed"
)

// TimingModelArgs is Dynamo main's timing_model object: {"type": "fixed",
// "prefill_ms": 2, "decode_ms": 1}. ParseArgs also takes the bare type
// string ("polynomial").
type TimingModelArgs struct {
	Type TimingModelType `json:"type"`
	// PrefillMs and DecodeMs are the fixed model's latencies, finite and
	// ≥ 0, both required for TimingFixed and unset otherwise.
	PrefillMs *float64 `json:"prefill_ms,omitempty"`
	DecodeMs  *float64 `json:"decode_ms,omitempty"`
}

// MaxNumSeqsOrInf returns the running-set cap, math.MaxInt when unbounded.
func (a Args) MaxNumSeqsOrInf() int {
	if a.MaxNumSeqs == nil {
		return math.MaxInt
	}
	return *a.MaxNumSeqs
}

// MaxNumBatchedTokensOrInf returns the per-pass token budget, math.MaxInt
// when unbounded.
func (a Args) MaxNumBatchedTokensOrInf() int {
	if a.MaxNumBatchedTokens == nil {
		return math.MaxInt
	}
	return *a.MaxNumBatchedTokens
}

// AbortTimeoutMs returns the source-hold abort timeout and whether one is
// set. A zero value counts as unset, so a hand-built Args with 0 does not
// abort every hold on the spot.
func (a Args) AbortTimeoutMs() (ms int64, ok bool) {
	if a.KVTransferAbortTimeoutMs == nil || *a.KVTransferAbortTimeoutMs <= 0 {
		return 0, false
	}
	return *a.KVTransferAbortTimeoutMs, true
}

// TransferDelayMs is the modeled time to move the KV of tokens tokens:
// tokens × kv_bytes_per_token / (kv_transfer_bandwidth × 1e9) s, in ms.
// It is 0 when either knob is unset or the bandwidth is 0.
func (a Args) TransferDelayMs(tokens int) float64 {
	if tokens <= 0 || a.KVBytesPerToken == nil || a.KVTransferBandwidth == nil || *a.KVTransferBandwidth <= 0 {
		return 0
	}
	bytes := float64(tokens) * float64(*a.KVBytesPerToken)
	return bytes / (*a.KVTransferBandwidth * 1e9) * 1000
}

// OnboardMsPerBlock is the modeled time to copy one block back from the
// host tier: block_size × kv_bytes_per_token / (bandwidth_g2_to_g1_gbps ×
// 1e9) s, in ms, the bandwidth DefaultBandwidthG2ToG1 when unset. It is 0
// when kv_bytes_per_token is unset or the bandwidth is 0.
func (a Args) OnboardMsPerBlock() float64 {
	return a.blockCopyMs(a.BandwidthG2ToG1, DefaultBandwidthG2ToG1)
}

// OffloadMsPerBlock is the modeled time to copy one evicted block into the
// host tier at the link's full bandwidth, as OnboardMsPerBlock at
// bandwidth_g1_to_g2_gbps (DefaultBandwidthG1ToG2 when unset).
func (a Args) OffloadMsPerBlock() float64 {
	return a.blockCopyMs(a.BandwidthG1ToG2, DefaultBandwidthG1ToG2)
}

// offloadBatch is OffloadBatchSize, DefaultOffloadBatchSize when 0.
func (a Args) offloadBatch() int {
	if a.OffloadBatchSize > 0 {
		return a.OffloadBatchSize
	}
	return DefaultOffloadBatchSize
}

// StageG3MsPerBlock is the modeled time to stage one block from the disk
// tier into the host tier, as OnboardMsPerBlock at bandwidth_g3_to_g2_gbps
// (DefaultBandwidthG3ToG2 when unset).
func (a Args) StageG3MsPerBlock() float64 {
	return a.blockCopyMs(a.BandwidthG3ToG2, DefaultBandwidthG3ToG2)
}

// StageG4MsPerBlock is the modeled time to stage one block from object
// storage into the host tier, as OnboardMsPerBlock at
// bandwidth_g4_to_g2_gbps (DefaultBandwidthG4ToG2 when unset).
func (a Args) StageG4MsPerBlock() float64 {
	return a.blockCopyMs(a.BandwidthG4ToG2, DefaultBandwidthG4ToG2)
}

// blockCopyMs is one block's copy in ms at bw GB/s, def when bw is nil.
func (a Args) blockCopyMs(bw *float64, def float64) float64 {
	if bw != nil {
		def = *bw
	}
	if a.KVBytesPerToken == nil || def <= 0 || a.BlockSize <= 0 {
		return 0
	}
	bytes := float64(a.BlockSize) * float64(*a.KVBytesPerToken)
	return bytes / (def * 1e9) * 1000
}

// DefaultBandwidthG2ToG1 is the host-to-GPU bandwidth in GB/s that times
// onboarding when bandwidth_g2_to_g1_gbps is unset, as in Dynamo's mocker.
const DefaultBandwidthG2ToG1 = 14.0

// DefaultBandwidthG3ToG2 and DefaultBandwidthG4ToG2 are the disk-to-host
// and object-storage-to-host bandwidths in GB/s when unset, as in Dynamo's
// mocker.
const (
	DefaultBandwidthG3ToG2 = 7.0
	DefaultBandwidthG4ToG2 = 4.0
)

// Defaults, in one place.
const (
	DefaultNumGPUBlocks            = 16384
	DefaultMaxNumSeqs              = 256
	DefaultMaxNumBatchedTokens     = 8192
	DefaultHandoffSessionTimeoutMs = 300000
	DefaultBlockSizeVLLM           = 64
	DefaultBlockSizeSGLang         = 1
	DefaultBlockSizeTRTLLM         = 32
)

// DefaultSGLangArgs returns Dynamo's SGLang defaults.
func DefaultSGLangArgs() SGLangArgs {
	return SGLangArgs{
		SchedulePolicy:           "fifo",
		PageSize:                 1,
		MaxPrefillTokens:         16384,
		ChunkedPrefillSize:       8192,
		ClipMaxNewTokens:         4096,
		ScheduleConservativeness: 1.0,
	}
}

// DefaultArgs returns a vLLM aggregated worker with Dynamo's defaults.
func DefaultArgs() Args {
	seqs, batched := DefaultMaxNumSeqs, DefaultMaxNumBatchedTokens
	return Args{
		EngineType:              EngineVLLM,
		NumGPUBlocks:            DefaultNumGPUBlocks,
		BlockSize:               DefaultBlockSizeVLLM,
		MaxNumSeqs:              &seqs,
		MaxNumBatchedTokens:     &batched,
		EnablePrefixCaching:     true,
		EnableChunkedPrefill:    true,
		SpeedupRatio:            1.0,
		DecodeSpeedupRatio:      1.0,
		DPSize:                  1,
		WorkerType:              WorkerAggregated,
		PreemptionMode:          PreemptLIFO,
		KVTransferTimingMode:    TransferFullPrompt,
		HandoffSessionTimeoutMs: DefaultHandoffSessionTimeoutMs,
	}
}
