package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Golden tests for the kv cost under dynamo_compat (docs/fidelity.md). The
// request has 10 blocks of 4 tokens; costs are worked out by hand from
// Dynamo main's formula (lib/kv-router/src/scheduling/selector/default.rs):
//
//	cost = prefill_load_scale × max((pending + isl)/bs − overlap, 0)
//	     + decode blocks + decode_active_request_weight × requests in flight
//
// and, for mocker's default, from the classic one:
//
//	cost = weight × (pending + isl − overlap·bs)/bs + decode blocks
func TestFidelity_KVCostMatchesDynamoMain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cfg    func(*Config)
		states []state
		want   uint64
		why    string
	}{
		// Equal at default settings: (0+40)/4 − 8 = 2, 2 + 10 = 12 against
		// 10 + 10 = 20; the classic cost gives the same 12 and 20.
		{"cache wins, as classic", nil, []state{{cached: 8}, {}}, 1, "12 < 20"},
		// prefill_load_scale is overlap_score_weight's new name: with 2,
		// 2·2 + 20 = 24 against 2·10 + 10 = 30.
		{"prefill_load_scale", func(c *Config) { c.PrefillLoadScale = ptr(2.0) }, []state{{cached: 8, active: 10}, {}}, 1, "24 < 30"},
		// Pending prefill tokens: (40 + 40)/4 − 0 = 20, 20 + 10 = 30
		// against 10 + 15 = 25.
		{"pending prefill", nil, []state{{prefill: 40}, {active: 5}}, 2, "30 > 25"},
		// decode_active_request_weight 3: worker 1 has 4 requests in flight,
		// 2 + 10 + 3·4 = 24 against 10 + 10 + 3·0 = 20.
		{"active request weight", func(c *Config) { c.DecodeActiveRequestWeight = 3 }, []state{{cached: 8, inflight: 4}, {}}, 2, "24 > 20"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Mode = ModeKV
			cfg.DynamoCompat = true
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			require.NoError(t, cfg.Validate())
			req := prompt("r", 10, 0)
			r := build(t, cfg, req, tc.states)
			for range 20 {
				assert.Equal(t, tc.want, pickOnce(r, req, cfg.PrefillScale(), true), tc.why)
			}
		})
	}
}

// TestFidelity_KVTieBreak: Dynamo main breaks a cost tie uniformly at
// random; mocker's default gives it to the smaller indexed tree first, as
// the classic router and its test_router_decisions do. Three workers with
// equal costs and trees of 3, 1 and 2 blocks.
func TestFidelity_KVTieBreak(t *testing.T) {
	t.Parallel()
	req := prompt("r", 4, 0)
	for _, compat := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Mode = ModeKV
		cfg.DynamoCompat = compat
		r := build(t, cfg, req, []state{{extra: 3}, {extra: 1}, {extra: 2}})
		seen := map[uint64]int{}
		for range 300 {
			seen[pickOnce(r, req, 1, true)]++
		}
		if compat {
			assert.Len(t, seen, 3, "any of the tied workers: %v", seen)
		} else {
			assert.Equal(t, map[uint64]int{2: 300}, seen, "the smallest tree")
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestFidelity_ConfigKeys: Dynamo main's router keys parse and validate.
func TestFidelity_ConfigKeys(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`{"router_mode":"kv","dynamo_compat":true,"prefill_load_scale":0.5,"decode_active_request_weight":2,"router_prune_target_ratio":0.6}`))
	require.NoError(t, err)
	assert.True(t, cfg.DynamoCompat)
	assert.Equal(t, 0.5, cfg.PrefillScale(), "prefill_load_scale wins over overlap_score_weight")
	assert.Equal(t, 2.0, cfg.DecodeActiveRequestWeight)
	assert.Equal(t, 0.6, cfg.RouterPruneTargetRatio)
	assert.Equal(t, DefaultRouterPruneTargetRatio, DefaultConfig().RouterPruneTargetRatio)
	assert.Equal(t, 0.8, DefaultRouterPruneTargetRatio, "Dynamo's default")
	for _, bad := range []string{
		`{"router_prune_target_ratio":0}`,
		`{"router_prune_target_ratio":1.2}`,
		`{"prefill_load_scale":-1}`,
		`{"decode_active_request_weight":-1}`,
	} {
		_, err := ParseConfig([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// TestDynamo_KVRoutingDocsExample mirrors the worked example of Dynamo's
// KV routing docs (Dynamo's docs/router/kv_cache_routing.md): with overlap weight 1
// three workers cost 1·8 + 10 = 18, 1·5 + 5 = 10 and 1·2 + 9 = 11 blocks,
// and the second wins. Built from a 2-block request (8 tokens, none
// cached): prefill blocks = (pending + 8)/4, decode blocks = active + 2.
// Both cost formulas give the same numbers.
func TestDynamo_KVRoutingDocsExample(t *testing.T) {
	t.Parallel()
	states := []state{
		{prefill: 24, active: 8}, // (24+8)/4 = 8, 8+2 = 10: 18
		{prefill: 12, active: 3}, // (12+8)/4 = 5, 3+2 = 5: 10
		{prefill: 0, active: 7},  // 8/4 = 2, 7+2 = 9: 11
	}
	for _, compat := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Mode = ModeKV
		cfg.DynamoCompat = compat
		req := prompt("r", 2, 0)
		r := build(t, cfg, req, states)
		assert.Equal(t, uint64(2), pickOnce(r, req, 1, true), "dynamo_compat %v", compat)
		want := []float64{18, 10, 11}
		require.Len(t, r.order, len(want))
		for i, w := range r.order {
			assert.InDelta(t, want[i], w.cost, 1e-12, "worker %d, dynamo_compat %v", i+1, compat)
		}
	}
}
