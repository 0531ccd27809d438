package router

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// optionKeys are the settings SetOption takes, by their JSON names, sorted.
var optionKeys = []string{
	"active_decode_blocks_threshold", "active_prefill_tokens_threshold",
	"active_prefill_tokens_threshold_frac", "block_size",
	"decode_active_request_weight", "disk_cache_hit_weight", "dynamo_compat",
	"host_cache_hit_weight", "overlap_score_weight",
	"prefill_load_scale", "router_max_tree_size", "router_mode",
	"router_prune_target_ratio", "router_request_ttl_secs",
	"router_temperature", "router_ttl_secs", "seed", "use_kv_events",
}

// OptionKeys lists the keys SetOption takes, sorted.
func OptionKeys() []string { return append([]string(nil), optionKeys...) }

// SetOption sets the setting named key (its JSON name, as Config's tags
// and Dynamo's flags spell it) from a decoded JSON or JavaScript value,
// naming field in any error. Numbers are read through internal/jsonval,
// so every bad value is reported in one shape; ranges that depend on
// other settings are left to Validate.
func (c *Config) SetOption(field, key string, v any) error {
	var err error
	switch key {
	case "router_mode":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %s", field, jsonval.Describe(v))
		}
		m, perr := ParseMode(s)
		if perr != nil {
			return fmt.Errorf("%s: %w", field, perr)
		}
		c.Mode = m
	case "block_size":
		var n int64
		n, err = jsonval.Int(field, v, 1, math.MaxInt32)
		c.BlockSize = int(n)
	case "overlap_score_weight":
		c.OverlapScoreWeight, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "router_temperature":
		c.RouterTemperature, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "use_kv_events":
		c.UseKVEvents, err = boolOption(field, v)
	case "router_ttl_secs":
		c.RouterTTLSecs, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "router_max_tree_size":
		var n int64
		n, err = jsonval.Int(field, v, 1, math.MaxInt32)
		c.RouterMaxTreeSize = int(n)
	case "router_request_ttl_secs":
		c.RouterRequestTTLSecs, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "active_prefill_tokens_threshold_frac":
		var f float64
		f, err = jsonval.Float(field, v, jsonval.AboveZero, math.Inf(1))
		c.ActivePrefillTokensThresholdFrac = &f
	case "active_decode_blocks_threshold":
		var f float64
		f, err = jsonval.Float(field, v, jsonval.AboveZero, 1)
		c.ActiveDecodeBlocksThreshold = &f
	case "active_prefill_tokens_threshold":
		var n int64
		n, err = jsonval.Int(field, v, 0, math.MaxInt64)
		c.ActivePrefillTokensThreshold = &n
	case "seed":
		var n int64
		n, err = jsonval.Int(field, v, 0, math.MaxInt64)
		c.Seed = uint64(n)
	case "router_prune_target_ratio":
		c.RouterPruneTargetRatio, err = jsonval.Float(field, v, jsonval.AboveZero, 1)
	case "prefill_load_scale":
		var f float64
		f, err = jsonval.Float(field, v, 0, math.Inf(1))
		c.PrefillLoadScale = &f
	case "decode_active_request_weight":
		c.DecodeActiveRequestWeight, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "host_cache_hit_weight":
		c.HostCacheHitWeight, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "disk_cache_hit_weight":
		c.DiskCacheHitWeight, err = jsonval.Float(field, v, 0, math.Inf(1))
	case "dynamo_compat":
		c.DynamoCompat, err = boolOption(field, v)
	default:
		return fmt.Errorf("%s: unknown key; valid keys: %s", field, strings.Join(optionKeys, ", "))
	}
	return err
}

func boolOption(field string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: want a boolean, got %s", field, jsonval.Describe(v))
	}
	return b, nil
}
