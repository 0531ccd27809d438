package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Mode picks how the router chooses a worker.
type Mode string

// Router modes; the strings match Dynamo's --router-mode values.
const (
	ModeRoundRobin  Mode = "round-robin"
	ModeRandom      Mode = "random"
	ModeLeastLoaded Mode = "least-loaded"
	ModeKV          Mode = "kv"
	ModePowerOfTwo  Mode = "power-of-two"
)

// Modes lists every valid mode, in the order help text shows them.
var Modes = []Mode{ModeRoundRobin, ModeRandom, ModeLeastLoaded, ModeKV, ModePowerOfTwo}

func modeList() string {
	s := make([]string, len(Modes))
	for i, m := range Modes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// ParseMode returns the mode named s (case-insensitive, surrounding space
// ignored).
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	for _, v := range Modes {
		if m == v {
			return m, nil
		}
	}
	return "", fmt.Errorf("router mode %q is not valid; valid modes: %s", s, modeList())
}

// Config configures a Router. JSON keys follow Dynamo's router settings.
// Start from DefaultConfig (or ParseConfig) rather than a zero value: the
// zero value has no mode and disables KV events.
type Config struct {
	// Mode is the selection policy.
	Mode Mode `json:"router_mode"`
	// OverlapScoreWeight scales the prefill term of the kv cost: higher
	// values favour cache hits over balancing active blocks. 0 makes kv mode
	// balance decode blocks only.
	OverlapScoreWeight float64 `json:"overlap_score_weight"`
	// RouterTemperature above 0 samples workers with a softmax over their
	// normalised costs instead of taking the cheapest.
	RouterTemperature float64 `json:"router_temperature"`
	// UseKVEvents feeds the kv index from the workers' KV events. When false,
	// the router records each routed request's blocks for the chosen worker
	// with a TTL instead (approximate mode) and ignores KV events.
	UseKVEvents bool `json:"use_kv_events"`
	// RouterTTLSecs is how long approximate mode trusts a routed block to
	// stay cached.
	RouterTTLSecs float64 `json:"router_ttl_secs"`
	// RouterMaxTreeSize bounds approximate mode's index, in blocks; past it
	// the oldest are evicted down to RouterPruneTargetRatio of it.
	RouterMaxTreeSize int `json:"router_max_tree_size"`
	// RouterPruneTargetRatio is the fraction of RouterMaxTreeSize an
	// over-full approximate index is pruned down to, in (0, 1].
	RouterPruneTargetRatio float64 `json:"router_prune_target_ratio"`
	// PrefillLoadScale is Dynamo main's name for OverlapScoreWeight (which
	// Dynamo keeps as a deprecated alias); when set it takes precedence.
	PrefillLoadScale *float64 `json:"prefill_load_scale,omitempty"`
	// DecodeActiveRequestWeight adds this many cost units per request in
	// flight on a worker to the kv cost, as Dynamo main does; 0 (the
	// default) leaves the cost as the classic one.
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight"`
	// DynamoCompat selects Dynamo main's kv cost and tie-break instead of
	// mocker's (docs/fidelity.md): prefill_load_scale × max(raw prefill
	// blocks − overlap, 0) + decode blocks + decode_active_request_weight ×
	// requests in flight, ties broken uniformly at random. mocker's
	// default breaks ties by the smaller indexed tree first, as the
	// classic router and its e2e test do.
	DynamoCompat bool `json:"dynamo_compat"`
	// HostCacheHitWeight is what a block counts in kv mode's overlap when
	// a worker holds it on its host tier (KV events of medium CPU),
	// continuing the prefix it holds on the GPU: a request routed there
	// copies it back instead of computing it. Dynamo's default, 0.75.
	HostCacheHitWeight float64 `json:"host_cache_hit_weight"`
	// DiskCacheHitWeight is the same for a block on the disk tier (DISK)
	// or in object storage (EXTERNAL), continuing the host tier's run.
	// Dynamo's default, 0.25. Both at 0 make a tier hit count for nothing,
	// as before tiers were indexed.
	DiskCacheHitWeight float64 `json:"disk_cache_hit_weight"`
	// ActiveDecodeBlocksThreshold, when set, marks a worker busy while its
	// active blocks (reported or predicted) exceed this fraction of its
	// total blocks. Nil disables the check.
	ActiveDecodeBlocksThreshold *float64 `json:"active_decode_blocks_threshold,omitempty"`
	// ActivePrefillTokensThreshold, when set, marks a worker busy while the
	// prompt tokens routed to it and not yet prefilled exceed it. Nil
	// disables the check.
	ActivePrefillTokensThreshold *int64 `json:"active_prefill_tokens_threshold,omitempty"`
	// ActivePrefillTokensThresholdFrac, when set, marks a worker busy while
	// the prompt tokens routed to it and not yet prefilled exceed this
	// multiple of its max_num_batched_tokens (WorkerInfo.MaxBatchedTokens,
	// DefaultMaxBatchedTokens when discovery does not give it). It may
	// exceed 1: pending tokens queue beyond one batch. Nil disables the
	// check; with both prefill thresholds set, either marks the worker busy.
	ActivePrefillTokensThresholdFrac *float64 `json:"active_prefill_tokens_threshold_frac,omitempty"`
	// RouterRequestTTLSecs bounds how long the router charges a request to
	// its workers: a request routed longer ago than this is dropped from
	// load tracking as if freed, so a caller that never calls Free (a lost
	// stream, a crashed client) cannot mark a worker loaded for ever. It is
	// checked at each routing decision, on the router's clock.
	RouterRequestTTLSecs float64 `json:"router_request_ttl_secs"`
	// Seed makes random choices repeat run to run.
	Seed uint64 `json:"seed"`
	// BlockSize is the tokens per KV block; it must equal every worker's.
	BlockSize int `json:"block_size"`
}

// Defaults, in one place.
const (
	DefaultOverlapScoreWeight = 1.0
	// DefaultHostCacheHitWeight and DefaultDiskCacheHitWeight are
	// Dynamo's host_cache_hit_weight and disk_cache_hit_weight.
	DefaultHostCacheHitWeight = 0.75
	DefaultDiskCacheHitWeight = 0.25
	DefaultRouterTTLSecs      = 120.0
	DefaultRouterMaxTreeSize  = 1 << 20
	// DefaultRouterPruneTargetRatio is Dynamo's router_prune_target_ratio.
	DefaultRouterPruneTargetRatio = 0.8
	DefaultBlockSize              = 64
	// DefaultRouterRequestTTLSecs is Dynamo's five minutes.
	DefaultRouterRequestTTLSecs = 300.0
	// DefaultMaxBatchedTokens stands in for a worker's
	// max_num_batched_tokens when discovery does not report it, as Dynamo
	// does, which makes the fractional prefill threshold all but inert.
	DefaultMaxBatchedTokens = 10_000_000
)

// DefaultConfig returns a round-robin router (Dynamo's default mode) with
// Dynamo's kv settings, KV events on and no busy thresholds.
func DefaultConfig() Config {
	return Config{
		Mode:               ModeRoundRobin,
		OverlapScoreWeight: DefaultOverlapScoreWeight,
		UseKVEvents:        true,
		RouterTTLSecs:      DefaultRouterTTLSecs,
		RouterMaxTreeSize:  DefaultRouterMaxTreeSize,
		BlockSize:          DefaultBlockSize,

		RouterPruneTargetRatio: DefaultRouterPruneTargetRatio,

		RouterRequestTTLSecs: DefaultRouterRequestTTLSecs,

		HostCacheHitWeight: DefaultHostCacheHitWeight,
		DiskCacheHitWeight: DefaultDiskCacheHitWeight,
	}
}

// ParseConfig reads one JSON object over DefaultConfig, so absent keys keep
// their defaults. Unknown keys and anything after the object are errors,
// and the result is validated.
func ParseConfig(data []byte) (Config, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return Config{}, fmt.Errorf("router config: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("router config: unexpected data after the JSON object at byte %d; give exactly one object", dec.InputOffset())
	}
	cfg := DefaultConfig()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := cfg.SetOption("router config: "+k, k, m[k]); err != nil {
			return Config{}, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// PrefillScale is the weight of the prefill term of the kv cost:
// PrefillLoadScale when set, else OverlapScoreWeight.
func (c Config) PrefillScale() float64 {
	if c.PrefillLoadScale != nil {
		return *c.PrefillLoadScale
	}
	return c.OverlapScoreWeight
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Validate reports the first field that is out of range, by its JSON name.
func (c Config) Validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return fmt.Errorf("router config: router_mode: %w", err)
	}
	if !finite(c.OverlapScoreWeight) || c.OverlapScoreWeight < 0 {
		return fmt.Errorf("router config: overlap_score_weight %v must be a finite number >= 0", c.OverlapScoreWeight)
	}
	if !finite(c.RouterTemperature) || c.RouterTemperature < 0 {
		return fmt.Errorf("router config: router_temperature %v must be a finite number >= 0 (0 picks the cheapest worker)", c.RouterTemperature)
	}
	if !finite(c.RouterTTLSecs) || c.RouterTTLSecs <= 0 {
		return fmt.Errorf("router config: router_ttl_secs %v must be > 0", c.RouterTTLSecs)
	}
	if c.RouterMaxTreeSize <= 0 {
		return fmt.Errorf("router config: router_max_tree_size %d must be > 0", c.RouterMaxTreeSize)
	}
	if r := c.RouterPruneTargetRatio; !(r > 0 && r <= 1) {
		return fmt.Errorf("router config: router_prune_target_ratio %v must be in (0, 1] (default %v)", r, DefaultRouterPruneTargetRatio)
	}
	if s := c.PrefillLoadScale; s != nil && (!finite(*s) || *s < 0) {
		return fmt.Errorf("router config: prefill_load_scale %v must be a finite number >= 0", *s)
	}
	if w := c.DecodeActiveRequestWeight; !finite(w) || w < 0 {
		return fmt.Errorf("router config: decode_active_request_weight %v must be a finite number >= 0", w)
	}
	if w := c.HostCacheHitWeight; !finite(w) || w < 0 {
		return fmt.Errorf("router config: host_cache_hit_weight %v must be a finite number >= 0 (default %v)", w, DefaultHostCacheHitWeight)
	}
	if w := c.DiskCacheHitWeight; !finite(w) || w < 0 {
		return fmt.Errorf("router config: disk_cache_hit_weight %v must be a finite number >= 0 (default %v)", w, DefaultDiskCacheHitWeight)
	}
	if t := c.ActiveDecodeBlocksThreshold; t != nil && (!finite(*t) || *t <= 0 || *t > 1) {
		return fmt.Errorf("router config: active_decode_blocks_threshold %v must be a fraction in (0, 1], or absent to disable", *t)
	}
	if t := c.ActivePrefillTokensThreshold; t != nil && *t < 0 {
		return fmt.Errorf("router config: active_prefill_tokens_threshold %d must be >= 0, or absent to disable", *t)
	}
	if t := c.ActivePrefillTokensThresholdFrac; t != nil && (!finite(*t) || *t <= 0) {
		return fmt.Errorf("router config: active_prefill_tokens_threshold_frac %v must be a finite number > 0 (a multiple of max_num_batched_tokens), or absent to disable", *t)
	}
	if !finite(c.RouterRequestTTLSecs) || c.RouterRequestTTLSecs <= 0 {
		return fmt.Errorf("router config: router_request_ttl_secs %v must be > 0 (default %v)", c.RouterRequestTTLSecs, DefaultRouterRequestTTLSecs)
	}
	if c.BlockSize <= 0 {
		return fmt.Errorf("router config: block_size %d must be > 0 and equal to the workers' block size", c.BlockSize)
	}
	return nil
}
