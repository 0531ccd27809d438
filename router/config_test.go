package router_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/router"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want router.Mode
	}{
		{"round-robin", router.ModeRoundRobin},
		{"random", router.ModeRandom},
		{"least-loaded", router.ModeLeastLoaded},
		{"kv", router.ModeKV},
		{"power-of-two", router.ModePowerOfTwo},
		{" KV ", router.ModeKV},
	}
	for _, tc := range tests {
		got, err := router.ParseMode(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got)
	}
	_, err := router.ParseMode("fastest")
	require.Error(t, err)
	for _, m := range []string{"round-robin", "random", "least-loaded", "kv", "power-of-two"} {
		assert.Contains(t, err.Error(), m, "the error lists every valid mode")
	}
	assert.Contains(t, err.Error(), `"fastest"`)
}

func TestConfig_ValidateNamesTheField(t *testing.T) {
	t.Parallel()
	neg, big := -0.5, 1.5
	negTokens := int64(-1)
	tests := []struct {
		field  string
		mutate func(*router.Config)
	}{
		{"router_mode", func(c *router.Config) { c.Mode = "nope" }},
		{"router_mode", func(c *router.Config) { c.Mode = "" }},
		{"overlap_score_weight", func(c *router.Config) { c.OverlapScoreWeight = -1 }},
		{"router_temperature", func(c *router.Config) { c.RouterTemperature = -0.1 }},
		{"router_ttl_secs", func(c *router.Config) { c.RouterTTLSecs = 0 }},
		{"router_max_tree_size", func(c *router.Config) { c.RouterMaxTreeSize = 0 }},
		{"active_decode_blocks_threshold", func(c *router.Config) { c.ActiveDecodeBlocksThreshold = &neg }},
		{"active_decode_blocks_threshold", func(c *router.Config) { c.ActiveDecodeBlocksThreshold = &big }},
		{"active_prefill_tokens_threshold", func(c *router.Config) { c.ActivePrefillTokensThreshold = &negTokens }},
		{"block_size", func(c *router.Config) { c.BlockSize = 0 }},
		{"active_prefill_tokens_threshold_frac", func(c *router.Config) { c.ActivePrefillTokensThresholdFrac = &neg }},
		{"router_request_ttl_secs", func(c *router.Config) { c.RouterRequestTTLSecs = 0 }},
	}
	for _, tc := range tests {
		cfg := router.DefaultConfig()
		tc.mutate(&cfg)
		err := cfg.Validate()
		require.Error(t, err, tc.field)
		assert.Contains(t, err.Error(), tc.field)
		_, err = router.New(cfg)
		assert.Error(t, err, "New validates too")
	}
	assert.NoError(t, router.DefaultConfig().Validate())
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := router.ParseConfig([]byte(`{"router_mode":"kv","router_temperature":0.5,"active_decode_blocks_threshold":0.85,"seed":3}`))
	require.NoError(t, err)
	assert.Equal(t, router.ModeKV, cfg.Mode)
	assert.Equal(t, 0.5, cfg.RouterTemperature)
	require.NotNil(t, cfg.ActiveDecodeBlocksThreshold)
	assert.Equal(t, 0.85, *cfg.ActiveDecodeBlocksThreshold)
	assert.Nil(t, cfg.ActivePrefillTokensThreshold, "thresholds are off unless given")
	assert.Equal(t, 1.0, cfg.OverlapScoreWeight, "absent keys keep defaults")
	assert.True(t, cfg.UseKVEvents)
	assert.Equal(t, 120.0, cfg.RouterTTLSecs)
	assert.Equal(t, uint64(3), cfg.Seed)

	assert.Equal(t, router.DefaultRouterRequestTTLSecs, cfg.RouterRequestTTLSecs)
	assert.Nil(t, cfg.ActivePrefillTokensThresholdFrac)

	cfg, err = router.ParseConfig([]byte(`{"router_request_ttl_secs":60,"active_prefill_tokens_threshold_frac":1.5}`))
	require.NoError(t, err)
	assert.Equal(t, 60.0, cfg.RouterRequestTTLSecs)
	require.NotNil(t, cfg.ActivePrefillTokensThresholdFrac)
	assert.Equal(t, 1.5, *cfg.ActivePrefillTokensThresholdFrac)

	_, err = router.ParseConfig([]byte(`{"router_mod":"kv"}`))
	assert.ErrorContains(t, err, "router_mod")
	_, err = router.ParseConfig([]byte(`{"router_mode":"fast"}`))
	assert.ErrorContains(t, err, "router_mode")
}

func TestParseConfig_RejectsTrailingData(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{} {}`, `{"seed":1} x`, `{}}`, `{} []`} {
		_, err := router.ParseConfig([]byte(in))
		assert.ErrorContains(t, err, "after the JSON object", in)
	}
	_, err := router.ParseConfig([]byte("{}\n\t "))
	assert.NoError(t, err, "trailing space is fine")
}

func TestAddWorker_Validation(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil)
	assert.ErrorContains(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: "gpu"}), "role")
	assert.ErrorContains(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: router.RoleAggregated, BlockSize: bs * 2}), "block_size")
	assert.ErrorContains(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: router.RoleAggregated, TotalBlocks: -1}), "total blocks")
	assert.ErrorContains(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: router.RoleAggregated, MaxBatchedTokens: -1}), "max batched tokens")
	require.NoError(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: router.RoleAggregated}))
	require.NoError(t, r.AddWorker(router.WorkerInfo{ID: 1, Role: router.RoleAggregated, TotalBlocks: 50}), "re-announcing is an update")
	ws, ok := r.Worker(1)
	require.True(t, ok)
	assert.Equal(t, 50, ws.Info.TotalBlocks)
	assert.Len(t, r.Workers(), 1)
}

// ParseConfig and the cluster's router_options read every key through one
// reader (SetOption), so a value of the wrong type or out of range is named
// the same way in both.
func TestParseConfig_NamesBadValues(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"router_temperature":"hot"}`:           `router_temperature: want a number`,
		`{"use_kv_events":1}`:                    `use_kv_events: want a boolean, got number 1`,
		`{"router_max_tree_size":0.5}`:           `router_max_tree_size: want an integer`,
		`{"active_decode_blocks_threshold":1.5}`: `active_decode_blocks_threshold`,
		`{"router_mode":7}`:                      `router_mode: want a string, got number 7`,
		`{"block_size":0}`:                       `block_size`,
	} {
		_, err := router.ParseConfig([]byte(in))
		assert.ErrorContains(t, err, want, in)
	}
	cfg, err := router.ParseConfig([]byte(`{"seed":9007199254740993}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(9007199254740993), cfg.Seed, "integers past 2^53 stay exact as JSON numbers")
	assert.Contains(t, router.OptionKeys(), "dynamo_compat")
}
