package xk6mocker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
)

func TestCluster_ConfigErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, config, second string
		want                 string
	}{
		{name: "pool args out of range", config: `{"prefill":{"workers":1,"args":{"num_gpu_blocks":-1}},"decode":{"workers":1}}`,
			want: "mocker.cluster: prefill.args.num_gpu_blocks"},
		{name: "pool size of the wrong type", config: `{"prefill":{"workers":"two"}}`, want: "mocker.cluster: prefill.workers"},
		{name: "unknown key", config: `{"routr":"kv"}`, want: "mocker.cluster: routr: unknown key"},
		{name: "unknown engine", config: `{"engine":"trt"}`, want: "mocker.cluster: engine"},
		{name: "unknown router", config: `{"router":"fancy"}`, want: "mocker.cluster: router"},
		{name: "cluster-wide args", config: `{"args":{"block_size":"big"}}`, want: "mocker.cluster: args.block_size"},
		{name: "not an object", config: `"vllm"`, want: "mocker.cluster: want a config object"},
		{name: "same name, another config", config: `{"name":"x","workers":1}`, second: `{"name":"x","workers":2}`,
			want: `mocker.cluster: name: cluster "x" already exists with another config: workers 1 vs 2`},
		{name: "default name, another seed", config: `{"seed":1}`, second: `{"seed":2}`,
			want: `mocker.cluster: name: cluster "default" already exists with another config: seed 1 vs 2`},
		{name: "a bad field under a name in use is reported as such", config: `{"name":"x","workers":1}`,
			second: `{"name":"x","workers":1,"args":{"max_num_seqs":0}}`, want: "mocker.cluster: args.max_num_seqs: must be at least 1"},
		{name: "NaN in args", config: `{"args":{"speedup_ratio":"NaN"}}`, want: "mocker.cluster: args.speedup_ratio: want a finite number, got NaN"},
		{name: "Infinity in pool args", config: `{"decode":{"args":{"num_gpu_blocks":"Infinity"}}}`, want: "mocker.cluster: decode.args.num_gpu_blocks: want a finite number, got +Inf"},
		{name: "args out of range", config: `{"args":{"num_gpu_blocks":1000000000000}}`, want: "mocker.cluster: args.num_gpu_blocks: must be between 1 and 2147483647"},
		{name: "workers beyond the cluster limit", config: `{"workers":100000}`, want: "mocker.cluster: workers: want an integer in [1, 1024], got 100000"},
		{name: "pool beyond memory", config: `{"args":{"num_gpu_blocks":2e9}}`, want: "mocker.cluster: args.num_gpu_blocks: 2000000000 blocks × 2 workers (128 bytes a block) need about 476.8 GiB"},
		{name: "speedup_ratio tiny", config: `{"args":{"speedup_ratio":1e-300}}`, want: "mocker.cluster: args.speedup_ratio: want a number in [0.001, 1000000], got 1e-300"},
		{name: "speedup_ratio huge", config: `{"args":{"speedup_ratio":1e308}}`, want: "mocker.cluster: args.speedup_ratio: want a number in [0.001, 1000000], got 1e+308"},
		{name: "worker_type against the pool", config: `{"decode":{"args":{"worker_type":"prefill"}}}`, want: `mocker.cluster: decode.args.worker_type: "prefill" conflicts with the decode pool`},
		{name: "engine_type against the engine", config: `{"args":{"engine_type":"sglang"}}`, want: `mocker.cluster: args.engine_type: "sglang" conflicts with engine "vllm"`},
		{name: "sglang args with vllm", config: `{"args":{"sglang":{"optimistic_prefill":true}}}`, want: `mocker.cluster: args.sglang: applies only to engine "sglang"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"CONFIG": tc.config}
			if tc.second != "" {
				env["SECOND"] = tc.second
			}
			res := runScript(t, "config_error.js", env)
			require.Equal(t, harness.ExitScriptException, res.code, "stderr: %s", res.stderr)
			assert.Contains(t, res.err.Error(), tc.want)
			assert.NotContains(t, res.stdout, "KV HANDOFF", "a failed init writes no summary")
		})
	}
}

func TestGenerate_MalformedRequestsThrowNamingTheField(t *testing.T) {
	cases := []struct{ name, req, want string }{
		{"prompt_tokens of the wrong type", `{"prompt_tokens":"many"}`, "generate: prompt_tokens: want an integer in [1, 4194304], got string \"many\""},
		{"prompt_tokens missing", `{"max_tokens":4}`, "generate: prompt_tokens: required"},
		{"prompt_tokens not an integer", `{"prompt_tokens":1.5}`, "generate: prompt_tokens"},
		{"prompt_tokens zero", `{"prompt_tokens":0}`, "generate: prompt_tokens: want an integer in [1, 4194304], got 0"},
		{"prompt_tokens beyond the bound", `{"prompt_tokens":2147483647}`, "generate: prompt_tokens: want an integer in [1, 4194304], got 2147483647"},
		{"token id beyond uint32", `{"tokens":[1,4294967296]}`, "generate: tokens[1]: want an integer in [0, 4294967295], got 4294967296"},
		{"tokens not an array", `{"tokens":{"0":1}}`, "generate: tokens: want an array of token ids, got an object"},
		{"empty tokens", `{"tokens":[]}`, "generate: tokens: want at least one token id"},
		{"max_tokens negative", `{"prompt_tokens":8,"max_tokens":-2}`, "generate: max_tokens"},
		{"misspelt field", `{"prompt_tokens":8,"max_token":2}`, "generate: max_token: unknown field"},
		{"prefix longer than the prompt", `{"prompt_tokens":8,"prefix":"p","prefix_tokens":9}`, "generate: prefix_tokens: want at most prompt_tokens (8)"},
		{"prefix not a string", `{"prompt_tokens":8,"prefix":3}`, "generate: prefix: want a string"},
		{"negative token id", `{"tokens":[1,-1]}`, "generate: tokens[1]"},
		{"tokens and prompt_tokens", `{"tokens":[1,2],"prompt_tokens":2}`, "generate: tokens: give either tokens or prompt_tokens"},
		{"not an object", `"hello"`, "generate: want a request object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runScript(t, "request_error.js", map[string]string{"REQ": tc.req})
			require.Equal(t, harness.ExitScriptException, res.code, "stderr: %s", res.stderr)
			assert.Contains(t, res.err.Error(), tc.want)
		})
	}
}

// result mirrors the script's result object, with types checked by JSON.
type result struct {
	Outcome         string   `json:"outcome"`
	Error           *string  `json:"error"`
	TTFTMs          *float64 `json:"ttft_ms"`
	ITLMs           *float64 `json:"itl_ms"`
	E2EMs           *float64 `json:"e2e_ms"`
	HoldMs          *float64 `json:"pin_ms"`
	TransferMs      *float64 `json:"transfer_ms"`
	DecodeWaitMs    *float64 `json:"decode_wait_ms"`
	OutputTokens    int      `json:"output_tokens"`
	CachedTokens    int      `json:"cached_tokens"`
	PrefillWorker   string   `json:"prefill_worker"`
	DecodeWorker    string   `json:"decode_worker"`
	PrefillDPRank   *int     `json:"prefill_dp_rank"`
	DecodeDPRank    *int     `json:"decode_dp_rank"`
	TransferID      *float64 `json:"transfer_id"`
	HoldStarted     bool     `json:"pinned"`
	HoldOutcome     string   `json:"pin_outcome"`
	PrefillRejected bool     `json:"prefill_rejected"`
	Truncated       *bool    `json:"truncated"`
}

type statsView struct {
	Requests       int  `json:"requests"`
	Completed      int  `json:"completed"`
	Holds          int  `json:"pins"`
	HoldsReleased  int  `json:"pins_released"`
	HoldsAborted   int  `json:"pins_aborted"`
	Aborts         *int `json:"aborts"`
	HeldBlocks     *int `json:"held_blocks"`
	ReservedBlocks *int `json:"reserved_blocks"`
	ActiveBlocks   *int `json:"active_blocks"`
	Drained        bool `json:"drained"`
	Workers        []struct {
		Name        string `json:"name"`
		DPRank      *int   `json:"dp_rank"`
		Role        string `json:"role"`
		TotalBlocks int    `json:"total_blocks"`
		FreeBlocks  *int   `json:"free_blocks"`
	} `json:"workers"`
}

func TestGenerate_ResultFields(t *testing.T) {
	res := runScript(t, "results.js", nil)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	var out struct {
		Disagg, Agg, AggAgain, Explicit, TooLong, Truncated result
		Stats, Drained, AggDrained, RankedStats             statsView
		Holds                                               []map[string]any
		Ranked                                              []result
	}
	raw := map[string]json.RawMessage{}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &raw), "stdout: %s", res.stdout)
	for key, dst := range map[string]any{
		"disagg": &out.Disagg, "agg": &out.Agg, "agg_again": &out.AggAgain, "explicit": &out.Explicit, "too_long": &out.TooLong, "truncated": &out.Truncated,
		"stats": &out.Stats, "drained": &out.Drained, "agg_drained": &out.AggDrained, "holds": &out.Holds,
		"ranked": &out.Ranked, "ranked_stats": &out.RankedStats,
	} {
		require.Containsf(t, raw, key, "setup data lacks %s", key)
		require.NoErrorf(t, json.Unmarshal(raw[key], dst), "%s: %s", key, raw[key])
	}

	t.Run("every result has every field with its type", func(t *testing.T) {
		for _, r := range []result{out.Disagg, out.Agg, out.AggAgain, out.Explicit, out.TooLong} {
			for name, p := range map[string]*float64{"ttft_ms": r.TTFTMs, "itl_ms": r.ITLMs, "e2e_ms": r.E2EMs, "pin_ms": r.HoldMs,
				"transfer_ms": r.TransferMs, "decode_wait_ms": r.DecodeWaitMs, "transfer_id": r.TransferID} {
				require.NotNilf(t, p, "%s missing from %+v", name, r)
				assert.GreaterOrEqualf(t, *p, 0.0, "%s", name)
			}
		}
	})
	t.Run("data-parallel ranks are named beside their worker", func(t *testing.T) {
		require.Len(t, out.Ranked, 2)
		for i, r := range out.Ranked {
			require.Equal(t, "completed", r.Outcome, "error: %v", r.Error)
			assert.Equal(t, "prefill-0", r.PrefillWorker)
			require.NotNil(t, r.PrefillDPRank)
			assert.Equal(t, i, *r.PrefillDPRank, "round-robin over the worker's two ranks")
			require.NotNil(t, r.DecodeDPRank)
			assert.Zero(t, *r.DecodeDPRank)
		}
		ws := out.RankedStats.Workers
		require.Len(t, ws, 3, "two prefill ranks and the decode worker")
		for i, w := range ws[:2] {
			assert.Equal(t, "prefill-0", w.Name)
			require.NotNil(t, w.DPRank)
			assert.Equal(t, i, *w.DPRank)
		}
		assert.True(t, out.RankedStats.Drained)
	})
	t.Run("disaggregated request hands off between two workers", func(t *testing.T) {
		r := out.Disagg
		require.Equal(t, "completed", r.Outcome, "error: %v", r.Error)
		assert.Nil(t, r.Error, "a completed request has a null error")
		assert.True(t, strings.HasPrefix(r.PrefillWorker, "prefill-"), r.PrefillWorker)
		assert.True(t, strings.HasPrefix(r.DecodeWorker, "decode-"), r.DecodeWorker)
		assert.NotEqual(t, r.PrefillWorker, r.DecodeWorker)
		assert.Greater(t, *r.TransferID, 0.0)
		assert.True(t, r.HoldStarted)
		assert.Equal(t, "transferred", r.HoldOutcome)
		assert.Greater(t, *r.TransferMs, 0.0, "kv_bytes_per_token and bandwidth give the transfer a modeled time")
		assert.Greater(t, *r.TTFTMs, 0.0)
		assert.LessOrEqual(t, *r.TTFTMs, *r.E2EMs)
		assert.Equal(t, 8, r.OutputTokens)
	})
	t.Run("aggregated request stays on one worker without a transfer", func(t *testing.T) {
		for _, r := range []result{out.Agg, out.AggAgain} {
			require.Equal(t, "completed", r.Outcome, "error: %v", r.Error)
			assert.Equal(t, r.PrefillWorker, r.DecodeWorker)
			assert.NotEmpty(t, r.PrefillWorker)
			assert.Zero(t, *r.TransferID)
			assert.False(t, r.HoldStarted)
			assert.Empty(t, r.HoldOutcome)
			assert.LessOrEqual(t, *r.TTFTMs, *r.E2EMs)
			assert.Equal(t, 8, r.OutputTokens)
		}
		assert.Zero(t, out.Agg.CachedTokens, "the first request finds an empty cache")
		assert.GreaterOrEqual(t, out.AggAgain.CachedTokens, 112, "the same prefix is served from the cache (whole blocks of 128 tokens)")
		assert.LessOrEqual(t, out.AggAgain.CachedTokens, 128, "only the shared prefix can be cached")
	})
	t.Run("explicit tokens", func(t *testing.T) {
		assert.Equal(t, "completed", out.Explicit.Outcome)
		assert.Equal(t, 2, out.Explicit.OutputTokens)
	})
	t.Run("a request cut short by max_model_len is completed, truncated, with the reason", func(t *testing.T) {
		r := out.Truncated
		require.Equal(t, "completed", r.Outcome)
		require.NotNil(t, r.Truncated)
		assert.True(t, *r.Truncated)
		assert.Less(t, r.OutputTokens, 50)
		require.NotNil(t, r.Error, "a truncated result says why in error")
		assert.Contains(t, *r.Error, "max_model_len 80")
		for _, full := range []result{out.Disagg, out.Agg} {
			require.NotNil(t, full.Truncated)
			assert.False(t, *full.Truncated)
			assert.Nil(t, full.Error)
		}
	})
	t.Run("a request the cluster cannot serve is rejected, not thrown", func(t *testing.T) {
		assert.Equal(t, "rejected", out.TooLong.Outcome)
		require.NotNil(t, out.TooLong.Error)
		assert.NotEmpty(t, *out.TooLong.Error)
	})
	t.Run("stats and drain", func(t *testing.T) {
		assert.Equal(t, 1, out.Stats.Requests)
		assert.Equal(t, 1, out.Stats.Holds)
		require.NotNil(t, out.Stats.Aborts)
		require.Len(t, out.Stats.Workers, 4)
		for _, w := range out.Stats.Workers {
			assert.Contains(t, []string{"prefill", "decode"}, w.Role, w.Name)
			assert.Positive(t, w.TotalBlocks)
			require.NotNil(t, w.FreeBlocks)
		}
		for _, s := range []statsView{out.Drained, out.AggDrained} {
			assert.True(t, s.Drained)
			require.NotNil(t, s.HeldBlocks)
			require.NotNil(t, s.ReservedBlocks)
			require.NotNil(t, s.ActiveBlocks)
			assert.Zero(t, *s.HeldBlocks)
			assert.Zero(t, *s.ReservedBlocks)
			assert.Zero(t, *s.ActiveBlocks)
		}
		assert.Equal(t, out.Drained.Holds, out.Drained.HoldsReleased+out.Drained.HoldsAborted)
		assert.Equal(t, 4, out.AggDrained.Requests)
	})
	t.Run("holds name both ends", func(t *testing.T) {
		require.Len(t, out.Holds, 1)
		h := out.Holds[0]
		assert.Equal(t, out.Disagg.PrefillWorker, h["prefill_worker"])
		assert.Equal(t, out.Disagg.DecodeWorker, h["decode_worker"])
		assert.Equal(t, *out.Disagg.TransferID, h["transfer_id"])
		assert.Equal(t, "transferred", h["outcome"])
	})
}

// point is one NDJSON sample.
type point struct {
	Type   string `json:"type"`
	Metric string `json:"metric"`
	Data   struct {
		Value float64           `json:"value"`
		Tags  map[string]string `json:"tags"`
	} `json:"data"`
}

func readPoints(t *testing.T, path string) map[string][]point {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]point{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p point
		require.NoError(t, json.Unmarshal(sc.Bytes(), &p), sc.Text())
		if p.Type == "Point" {
			out[p.Metric] = append(out[p.Metric], p)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestMetrics_EmittedWithTags(t *testing.T) {
	const iterations = 30
	path := filepath.Join(t.TempDir(), "out.ndjson")
	res := runScript(t, "metrics.js", map[string]string{"ITERATIONS": "30"}, "json="+path)
	require.Equal(t, 0, res.code, "its thresholds need aborts; stderr: %s\n%s", res.stderr, res.stdout)
	pts := readPoints(t, path)

	for _, name := range []string{MetricRequests, MetricRequestFailed, MetricTTFT, MetricITL, MetricE2E, MetricKVPins,
		MetricKVPinDuration, MetricKVAborts, MetricKVTransfer, MetricDecodeWait, MetricKVHeldBlocks} {
		require.NotEmptyf(t, pts[name], "no samples of %s", name)
		for _, p := range pts[name] {
			assert.Equalf(t, "metrics", p.Data.Tags["cluster"], "%s tags %v", name, p.Data.Tags)
			assert.Equalf(t, "vllm", p.Data.Tags["engine"], "%s tags %v", name, p.Data.Tags)
			assert.Equalf(t, "round-robin", p.Data.Tags["router"], "%s tags %v", name, p.Data.Tags)
		}
	}
	require.Len(t, res.clusters, 1)
	st := res.clusters[0].stats
	// Every request of this run ends inside an iteration, so the samples
	// by outcome add up to the cluster's own counts of each ending.
	total, failed := 0.0, 0.0
	byOutcome := map[string]float64{}
	for _, p := range pts[MetricRequests] {
		byOutcome[p.Data.Tags["outcome"]] += p.Data.Value
		total += p.Data.Value
	}
	assert.Equal(t, float64(iterations), total, "one mocker_requests sample per request")
	assert.Positive(t, byOutcome["aborted"], "the cluster aborts some transfers")
	assert.Equal(t, map[string]float64{
		cluster.OutcomeCompleted: float64(st.Completed), cluster.OutcomeAborted: float64(st.Aborted),
		cluster.OutcomeRejected: float64(st.Rejected), cluster.OutcomeError: float64(st.Errored),
	}, withZeros(byOutcome, cluster.OutcomeCompleted, cluster.OutcomeAborted, cluster.OutcomeRejected, cluster.OutcomeError),
		"mocker_requests by outcome against the cluster's counts")
	for _, p := range pts[MetricRequestFailed] {
		failed += p.Data.Value
	}
	require.Len(t, pts[MetricRequestFailed], iterations)
	outcomes := map[string]float64{}
	for _, p := range pts[MetricKVPinDuration] {
		assert.Equal(t, "prefill", p.Data.Tags["role"])
		outcomes[p.Data.Tags["outcome"]]++
	}
	assert.Positive(t, outcomes["transferred"], "some holds transferred")
	assert.Positive(t, outcomes["aborted"], "some holds aborted")
	assert.Len(t, outcomes, 2, "hold outcomes are transferred or aborted: %v", outcomes)
	aborts := 0.0
	for _, p := range pts[MetricKVAborts] {
		assert.Equal(t, "prefill", p.Data.Tags["role"])
		aborts += p.Data.Value
	}
	assert.GreaterOrEqual(t, aborts, outcomes["aborted"], "every aborted hold with a duration is counted")
	assert.Equal(t, aborts, failed, "in this cluster only aborts fail requests")
	for _, p := range pts[MetricKVPins] {
		assert.Equal(t, "prefill", p.Data.Tags["role"])
	}
	waits := map[string]int{}
	for _, p := range pts[MetricDecodeWait] {
		assert.Equal(t, "decode", p.Data.Tags["role"])
		outcome := p.Data.Tags["outcome"]
		waits[outcome]++
		if outcome == "aborted" {
			assert.Positive(t, p.Data.Value, "an aborted hold's decode waited for something")
		}
	}
	assert.Equal(t, int(outcomes["transferred"]), waits["transferred"], "one decode wait per transferred hold")
	assert.Equal(t, int(outcomes["aborted"]), waits["aborted"], "one decode wait per aborted hold: how long it waited in vain")
	assert.Len(t, waits, 2, "decode waits are tagged with the hold's outcome: %v", waits)
	// A TTFT needs a first token: a completed request always has one, an
	// aborted one has one when its prefill finished before the abort; a
	// rejected or failed request never does.
	ttfts := map[string]float64{}
	for _, p := range pts[MetricTTFT] {
		outcome := p.Data.Tags["outcome"]
		assert.Contains(t, []string{cluster.OutcomeCompleted, cluster.OutcomeAborted}, outcome, "no TTFT without a first token")
		ttfts[outcome]++
	}
	assert.Equal(t, float64(st.Completed), ttfts[cluster.OutcomeCompleted], "one TTFT per completed request")
	assert.LessOrEqual(t, ttfts[cluster.OutcomeAborted], float64(st.Aborted), "at most one TTFT per aborted request")
	for _, p := range pts[MetricE2E] {
		assert.Equal(t, "completed", p.Data.Tags["outcome"])
	}
	maxHeld := 0.0
	for _, p := range pts[MetricKVHeldBlocks] {
		assert.GreaterOrEqual(t, p.Data.Value, 0.0)
		maxHeld = max(maxHeld, p.Data.Value)
	}
	assert.Positive(t, maxHeld, "held blocks were sampled while holds lasted")
	assert.Equal(t, float64(st.PeakHeldBlocks), maxHeld, "the gauge's max is the cluster's peak held blocks")
	assert.Equal(t, uint64(iterations), st.Requests)
	assert.Equal(t, st.HoldsAborted, uint64(aborts), "metric and cluster agree on aborts")
}

// withZeros returns m with each of keys present, 0 where m lacks it, so a
// comparison with a full map also fails on an unexpected key.
func withZeros(m map[string]float64, keys ...string) map[string]float64 {
	out := make(map[string]float64, len(m)+len(keys))
	for _, k := range keys {
		out[k] = 0
	}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestMetrics_PrefillRejectionsMatchTheCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.ndjson")
	res := runScript(t, "rejections.js", nil, "json="+path)
	require.Equal(t, 0, res.code, "its threshold needs a prefill rejection; stderr: %s\n%s", res.stderr, res.stdout)
	require.Len(t, res.clusters, 1)
	st := res.clusters[0].stats
	pts := readPoints(t, path)

	rejections := 0.0
	for _, p := range pts[MetricPrefillRejection] {
		assert.Equal(t, "prefill", p.Data.Tags["role"], "tags %v", p.Data.Tags)
		assert.Equal(t, "rejections", p.Data.Tags["cluster"], "tags %v", p.Data.Tags)
		rejections += p.Data.Value
	}
	require.Positive(t, st.PrefillRejections, "the busy prefill worker refused requests")
	assert.Equal(t, float64(st.PrefillRejections), rejections, "one mocker_prefill_rejections per refusal by the prefill pool")
	rejected := 0.0
	for _, p := range pts[MetricRequests] {
		if p.Data.Tags["outcome"] == cluster.OutcomeRejected {
			rejected += p.Data.Value
		}
	}
	assert.Equal(t, float64(st.Rejected), rejected, "each refusal is also a rejected request")
}

func TestMetrics_ThresholdsWithoutSamples(t *testing.T) {
	res := runScript(t, "unsampled.js", nil)
	require.Equal(t, 0, res.code, "thresholds on unsampled mocker metrics parse and pass; stderr: %s\n%s", res.stderr, res.stdout)
	assert.Contains(t, res.stdout, "mocker_kv_aborts")
}

func TestGenerateAsync_Resolves(t *testing.T) {
	res := runScript(t, "async.js", nil)
	require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
	require.Len(t, res.clusters, 1)
	assert.Equal(t, uint64(16), res.clusters[0].stats.Completed)
}

func TestDrain_LeavesNothingHeld(t *testing.T) {
	res := runScript(t, "drain.js", nil)
	require.Equal(t, 0, res.code, "teardown's drain left work behind; stderr: %s\n%s", res.stderr, res.stdout)
	require.Len(t, res.clusters, 1)
	st := res.clusters[0].stats
	assert.Zero(t, st.HeldBlocks)
	assert.Zero(t, st.ReservedBlocks)
	assert.Zero(t, st.ActiveBlocks)
	assert.Equal(t, st.Holds, st.HoldsReleased+st.HoldsAborted)
	assert.Equal(t, uint64(12), st.Requests)
}

func TestSummary_KVHandoffSection(t *testing.T) {
	t.Run("after a run that used a cluster", func(t *testing.T) {
		res := runScript(t, "metrics.js", map[string]string{"ITERATIONS": "18"})
		require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
		out := res.stdout
		require.Contains(t, out, `█ KV HANDOFF  cluster "metrics": vllm, router round-robin, 2 prefill / 1 decode`)
		for _, want := range []string{"holds started", "released", "aborted", "hold duration", "peak held blocks", "prefill refusals", "longest holds (prefill → decode)"} {
			assert.Contains(t, out, want)
		}
		st := res.clusters[0].stats
		assert.Regexp(t, `holds started\.+: `+itoa(st.Holds)+`\n`, out)
		assert.Regexp(t, `aborted\.+: `+itoa(st.HoldsAborted)+` \(abort or session deadline\)\n`, out)
		assert.Regexp(t, `prefill-\d +→ decode-0 +\S+ +(aborted|transferred) +transfer \d+`, out)
		assert.Less(t, strings.Index(out, "█ METRICS"), strings.Index(out, "█ KV HANDOFF"), "the section follows the metrics")
	})
	t.Run("not after a run without a cluster", func(t *testing.T) {
		res := runScript(t, "no_cluster.js", nil)
		require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
		assert.Contains(t, res.stdout, "█ METRICS")
		assert.NotContains(t, res.stdout, "KV HANDOFF")
		assert.Empty(t, res.clusters)
	})
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestMetrics_InterruptedRequestsAreCountedInTheSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.ndjson")
	res := runScript(t, "interrupted.js", nil, "json="+path)
	require.Equal(t, 0, res.code, "stderr: %s\n%s", res.stderr, res.stdout)
	require.Len(t, res.clusters, 1)
	st := res.clusters[0].stats
	require.Positive(t, st.Requests)
	recorded := 0.0
	for _, p := range readPoints(t, path)[MetricRequests] {
		recorded += p.Data.Value
	}
	outside := float64(st.Requests) - recorded
	require.Positive(t, outside, "gracefulStop: 0s cuts requests that run for seconds")
	assert.Regexp(t, `outside iterations\.+: `+itoa(uint64(outside))+` requests ended after their VU was interrupted`, res.stdout)
	// and the drain in teardown counts them lost, once
	lost := 0.0
	for _, p := range readPoints(t, path)[MetricRequestsLost] {
		lost += p.Data.Value
	}
	assert.Equal(t, outside, lost, "%s counts the requests left out of the metrics", MetricRequestsLost)
}

func TestSleep_SleepsModeledTime(t *testing.T) {
	res := runScript(t, "sleep.js", nil)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	var out struct {
		AdvancedMs   float64           `json:"advanced_ms"`
		SpeedupRatio float64           `json:"speedup_ratio"`
		Negative     string            `json:"negative"`
		Bounds       map[string]string `json:"bounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	assert.InDelta(t, 1000.0, out.SpeedupRatio, 1e-9)
	assert.GreaterOrEqual(t, out.AdvancedMs, 3000.0, "the modeled clock moved at least the modeled time slept")
	assert.Less(t, out.AdvancedMs, 100*3000.0, "sleep(ms) sleeps ms/speedup of wall time, not ms")
	assert.Contains(t, out.Negative, "sleep: want a number of milliseconds in [0, 1000000000], got -1 (modeled milliseconds)")
	assert.Equal(t, map[string]string{
		"sleep 1e18":      "Error: sleep: want a number of milliseconds in [0, 1000000000], got 1e+18 (modeled milliseconds)",
		"sleep NaN":       "Error: sleep: want a number of milliseconds in [0, 1000000000], got NaN (modeled milliseconds)",
		"sleep string":    `Error: sleep: want a number of milliseconds in [0, 1000000000], got string "5" (modeled milliseconds)`,
		"drain 1e18":      "Error: drain: timeoutMs: want a number of milliseconds in (0, 1000000000], got 1e+18",
		"drain 0":         "Error: drain: timeoutMs: want a number of milliseconds in (0, 1000000000], got 0",
		"drain -Infinity": "Error: drain: timeoutMs: want a number of milliseconds in (0, 1000000000], got -Inf",
	}, out.Bounds, "out of range: a clear error, never a return at once")
}

func TestDrainMessage_OneSentenceWithTheCount(t *testing.T) {
	st := cluster.Stats{InFlight: 40, HeldBlocks: 12, ActiveBlocks: 30}
	cases := []struct {
		name    string
		st      cluster.Stats
		stopped bool
		err     error
		want    string
	}{
		{"timed out in flight", st, false, fmt.Errorf("drain: 40 requests in flight: %w", context.DeadlineExceeded),
			"drain: 40 requests still in flight (held 12, reserved 0, active 30 blocks) after waiting 1ms (wall time); give drain a longer timeout, or stop the load earlier"},
		{"timed out on the workers", cluster.Stats{HeldBlocks: 4}, false, fmt.Errorf("drain: decode-0 busy: %w", context.DeadlineExceeded),
			"drain: work still on the workers (held 4, reserved 0, active 0 blocks) after waiting 1ms (wall time); give drain a longer timeout, or stop the load earlier"},
		{"test ending", st, true, fmt.Errorf("drain: x: %w", context.Canceled),
			"drain: stopped with 40 requests still in flight (held 12, reserved 0, active 30 blocks): the test is ending"},
		{"closed", st, false, errors.New("drain: cluster closed"), "drain: cluster closed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := drainMessage(tc.st, time.Millisecond, tc.stopped, tc.err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, 1, strings.Count(got, "drain:"), "says drain once")
		})
	}
}

func TestCluster_IOInTheInitContextIsAnInitError(t *testing.T) {
	for _, call := range []string{"generate", "generateAsync", "drain", "sleep", "stats"} {
		t.Run(call, func(t *testing.T) {
			res := runScript(t, "init_io.js", map[string]string{"CALL": call})
			require.Equal(t, harness.ExitScriptException, res.code, "stderr: %s", res.stderr)
			assert.Contains(t, res.err.Error(), "cluster."+call+": not allowed in the init context")
			for _, c := range res.clusters {
				assert.Zero(t, c.stats.Requests, "no request reached cluster %q", c.name)
			}
		})
	}
	t.Run("none: the same calls outside init work", func(t *testing.T) {
		res := runScript(t, "init_io.js", map[string]string{"CALL": "none"})
		require.Equal(t, harness.ExitOK, res.code, "stderr: %s", res.stderr)
		require.Len(t, res.clusters, 1)
		assert.Equal(t, uint64(1), res.clusters[0].stats.Completed)
	})
}

// TestCluster_OnlyInTheInitContext: a script that builds clusters as it
// runs (a new name per iteration) is refused at every call, so clusters,
// their workers and sockets cannot pile up.
func TestCluster_OnlyInTheInitContext(t *testing.T) {
	for _, where := range []string{"setup", "default", "teardown"} {
		t.Run(where, func(t *testing.T) {
			// On the virtual clock: its 20 iterations never sleep, and on a
			// paced clock each would wait a second of wall time for the
			// next instant.
			res := runScriptWith(t, "cluster_outside_init.js", map[string]string{"WHERE": where}, func(c *harness.Config) { c.Clock = harness.ClockVirtual })
			require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
			assert.Empty(t, res.clusters, "no cluster was built")
			assert.Contains(t, res.stderr, "mocker.cluster: call it in the init context")
			if where != "default" {
				assert.Regexp(t, `"refused":[12],"built":0`, res.stderr)
			}
		})
	}
}

// TestCascade_AbortThresholdCatchesARunWithoutAborts runs scripts/cascade.js
// with an abort timeout no hold reaches: its abort thresholds must be
// crossed, the per-request one included (a Trend's min over no aborted
// sample would pass).
func TestCascade_AbortThresholdCatchesARunWithoutAborts(t *testing.T) {
	res := runScript(t, "../../scripts/cascade.js", map[string]string{"DURATION": "2s", "VUS": "16", "ABORT_MS": "5000"})
	require.Equal(t, harness.ExitThresholdsFailed, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr+res.stdout, "0 aborted")
	assert.Regexp(t, `mocker_requests[^\n]*\n(?:[^\n]*\n)*?\s*\{outcome:aborted\}\s*\n\s*✗ 'count>0' count=0`, res.stdout)
}

// TestTagSet_RecentSetsMatchTheirKeys: the tag sets tagSet hands out from
// its last few and from its cache carry their key's tags, for more keys
// than it keeps recent, on two clusters, in any order.
func TestTagSet_RecentSetsMatchTheirKeys(t *testing.T) {
	inst := &instance{}
	a := &entry{name: "a", engine: "vllm", router: "kv"}
	b := &entry{name: "b", engine: "sglang", router: "round_robin"}
	var keys []tagKey
	for _, e := range []*entry{a, b} {
		base := tagKey{e: e}
		keys = append(keys, base, base.withOutcome("completed"), base.withOutcome(""),
			base.withRole("prefill"), base.withRole("prefill").withOutcome("aborted"))
	}
	want := func(k tagKey) map[string]string {
		var kv []string
		if k.hasRole {
			kv = append(kv, "role", k.role)
		}
		if k.hasOutcome {
			kv = append(kv, "outcome", k.outcome)
		}
		return k.e.tags(kv...)
	}
	for round := range 3 {
		for i := range keys {
			k := keys[(i*7+round)%len(keys)]
			got := map[string]string{}
			for key, val := range inst.tagSet(k).All() {
				got[key] = val
			}
			assert.Equal(t, want(k), got, "round %d, key %+v", round, k)
		}
	}
}
