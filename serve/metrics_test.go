package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// scrape reads /metrics with Prometheus's own text parser.
func scrape(t *testing.T, hc *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := hc.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// sum adds a family's values (counter, gauge, or a histogram's count)
// over the series whose labels include want.
func sum(f *dto.MetricFamily, want map[string]string) float64 {
	if f == nil {
		return -1
	}
	total := 0.0
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// sent is what the responses of a run said, summed.
type sent struct {
	mu                              sync.Mutex
	requests, prompt, output, cache int
}

// send posts one completion, streamed or not, and adds its usage to s.
func (s *sent) send(t *testing.T, hc *http.Client, url, prompt string, stream bool, maxTokens int) {
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "stream": %v}`, prompt, maxTokens, stream)
	if stream {
		body = fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "stream": true, "stream_options": {}}`, prompt, maxTokens)
	}
	resp, err := hc.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var u usage
	if stream {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || line == "[DONE]" {
				continue
			}
			var ch struct {
				Usage *usage `json:"usage"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &ch))
			if ch.Usage != nil {
				u = *ch.Usage
			}
		}
		require.NoError(t, sc.Err())
	} else {
		var r responseOut
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
		u = r.Usage
	}
	require.NotNil(t, u.PromptTokensDetails, "usage with cached tokens")
	s.mu.Lock()
	s.requests++
	s.prompt += u.PromptTokens
	s.output += u.CompletionTokens
	s.cache += u.PromptTokensDetails.CachedTokens
	s.mu.Unlock()
}

// TestMetrics_VLLMNamesAgreeWithResponses: Prometheus's parser reads every
// vLLM name and mocker's own, and the counters equal what the responses
// said: prefix_cache_hits_total is the summed cached tokens, and so on.
func TestMetrics_VLLMNamesAgreeWithResponses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  cluster.Config
	}{
		{"aggregated-kv", cluster.Config{Router: "kv", Args: fast}},
		{"disagg", cluster.Config{Disagg: true, Prefill: cluster.PoolConfig{Workers: 2}, Args: fast}},
		{"dp2", cluster.Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1000, "dp_size": 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := startServer(t, tc.cfg, Options{Model: "m1"})
			hc := client(ts)
			var s sent
			// One request per prefix first, so that the rest, sent at
			// once, find it cached however they interleave.
			for i := range 3 {
				s.send(t, hc, ts.URL, fmt.Sprintf("%s user %d asks something", longPrefix, i), false, 2)
			}
			var wg sync.WaitGroup
			for i := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.send(t, hc, ts.URL, fmt.Sprintf("%s user %d asks something", longPrefix, i%3), i%2 == 0, 3+i%5)
				}()
			}
			wg.Wait()
			require.Positive(t, s.cache, "requests sharing a prefix hit the cache")
			f := scrape(t, hc, ts.URL)
			for _, name := range []string{
				"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
				"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
				"vllm:generation_tokens_total", "vllm:request_success_total", "vllm:time_to_first_token_seconds",
				"vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
				"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_queue_time_seconds",
				"vllm:cache_config_info",
				"mocker_kv_held_blocks", "mocker_kv_holds_total", "mocker_kv_aborts_total", "mocker_prefill_refusals_total",
				"mocker_clock_lag_seconds", "mocker_stream_lag_seconds",
			} {
				require.Contains(t, f, name)
			}
			model := map[string]string{"model_name": "m1"}
			assert.Equal(t, float64(s.cache), sum(f["vllm:prefix_cache_hits_total"], model))
			assert.Equal(t, float64(s.prompt), sum(f["vllm:prefix_cache_queries_total"], model))
			assert.Equal(t, float64(s.prompt), sum(f["vllm:prompt_tokens_total"], model))
			assert.Equal(t, float64(s.output), sum(f["vllm:generation_tokens_total"], model))
			assert.Equal(t, float64(s.requests), sum(f["vllm:request_success_total"], map[string]string{"finished_reason": "length"}))
			assert.Equal(t, float64(s.requests), sum(f["vllm:time_to_first_token_seconds"], model))
			assert.Equal(t, float64(s.output-s.requests), sum(f["vllm:inter_token_latency_seconds"], model))
			assert.Zero(t, sum(f["mocker_kv_held_blocks"], nil))
			assert.Zero(t, sum(f["vllm:num_requests_running"], nil))
			for _, m := range f["vllm:cache_config_info"].Metric {
				assert.Equal(t, 1.0, m.Gauge.GetValue())
			}
			if tc.cfg.Disagg {
				assert.Equal(t, float64(s.requests), sum(f["mocker_kv_holds_total"], map[string]string{"outcome": "transferred"}))
			}
			if tc.name == "dp2" {
				assert.Len(t, f["vllm:num_requests_running"].Metric, 2, "one series per rank")
			}
		})
	}
}

// TestMetrics_SGLangNames: an SGLang cluster is scraped under SGLang's
// names, its cached tokens equal to the responses'.
func TestMetrics_SGLangNames(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Engine: "sglang", Router: "kv", Args: fast}, Options{})
	hc := client(ts)
	var s sent
	for i := range 6 {
		s.send(t, hc, ts.URL, longPrefix+fmt.Sprint(i), i%2 == 1, 4)
	}
	f := scrape(t, hc, ts.URL)
	for _, name := range []string{
		"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
		"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
		"sglang:num_requests_total", "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
		"sglang:e2e_request_latency_seconds", "sglang:cache_config_info",
	} {
		require.Contains(t, f, name)
	}
	assert.NotContains(t, f, "vllm:num_requests_running")
	assert.Positive(t, s.cache)
	assert.Equal(t, float64(s.cache), sum(f["sglang:cached_tokens_total"], nil))
	assert.Equal(t, float64(s.requests), sum(f["sglang:num_requests_total"], nil))
}

// TestMetrics_AbortCounted: the aborted hold of TestErrors_AbortedHoldSaysSo
// shows as one abort and one aborted hold, no block held after it.
func TestMetrics_AbortCounted(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, abortConfig(), Options{})
	hc := client(ts)
	before := scrape(t, hc, ts.URL)
	assert.Zero(t, sum(before["mocker_kv_aborts_total"], nil))
	a := strandAndAbort(t, s, hc, ts.URL, func() sentAnswer {
		return send(hc, ts.URL+"/v1/completions", `{"prompt": [9,10,11,12,13,14,15,16,17], "max_tokens": 4}`)
	})
	require.NoError(t, a.err)
	assert.Equal(t, http.StatusInternalServerError, a.status)
	after := scrape(t, hc, ts.URL)
	assert.Equal(t, 1.0, sum(after["mocker_kv_aborts_total"], nil))
	assert.Equal(t, 1.0, sum(after["mocker_kv_holds_total"], map[string]string{"outcome": "aborted"}))
	assert.Equal(t, 1.0, sum(after["vllm:request_success_total"], map[string]string{"finished_reason": "abort"}))
	assert.Zero(t, sum(after["mocker_kv_held_blocks"], nil))
}

// TestMetrics_QueueTime: vllm:request_queue_time_seconds has vLLM's
// buckets and observes each request's modeled arrival to its first
// scheduling: a worker that runs one request at a time makes the
// concurrent ones wait, the histogram's sum is the summed X-Mocker-Queue-Ms
// of the answers, and queue plus prefill time is the time to first token.
func TestMetrics_QueueTime(t *testing.T) {
	t.Parallel()
	_, ts := startServer(t, cluster.Config{Workers: 1, Args: map[string]any{"speedup_ratio": 100, "max_num_seqs": 1}}, Options{})
	hc := client(ts)
	var mu sync.Mutex
	var queueMs, ttftMs float64
	var wg sync.WaitGroup
	const n = 12
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"prompt": "request %d %s", "max_tokens": 8}`, i, longPrefix)
			resp, err := hc.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			var q, f float64
			_, err = fmt.Sscan(resp.Header.Get(HeaderQueue), &q)
			assert.NoError(t, err, "the %s header", HeaderQueue)
			_, err = fmt.Sscan(resp.Header.Get(HeaderTTFT), &f)
			assert.NoError(t, err)
			assert.GreaterOrEqual(t, q, 0.0)
			assert.LessOrEqual(t, q, f, "queueing is part of the time to first token")
			mu.Lock()
			queueMs += q
			ttftMs += f
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Positive(t, queueMs, "with one running slot, concurrent requests wait")
	f := scrape(t, hc, ts.URL)
	q := f["vllm:request_queue_time_seconds"]
	require.NotNil(t, q)
	require.Len(t, q.Metric, 1)
	h := q.Metric[0].Histogram
	assert.Equal(t, uint64(n), h.GetSampleCount())
	// The headers round to the microsecond.
	assert.InDelta(t, queueMs/1e3, h.GetSampleSum(), n*1e-6)
	var bounds []float64
	for _, b := range h.Bucket {
		bounds = append(bounds, b.GetUpperBound())
	}
	// vLLM's request-latency buckets (vllm/v1/metrics/loggers.py).
	assert.Equal(t, []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680, math.Inf(1)}, bounds)
	prefill := f["vllm:request_prefill_time_seconds"].Metric[0].Histogram.GetSampleSum()
	assert.InDelta(t, ttftMs/1e3, h.GetSampleSum()+prefill, 2*n*1e-6, "queue + prefill = time to first token")
}

// labelNames are the label names of a family's first series, sorted.
func labelNames(f *dto.MetricFamily) []string {
	var names []string
	for _, l := range f.Metric[0].Label {
		names = append(names, l.GetName())
	}
	slices.Sort(names)
	return names
}

// TestMetrics_TRTLLMNames: a TRT-LLM cluster is scraped under the names
// Dynamo's mocker gives TensorRT-LLM (vLLM's set under trtllm:, labels
// model_name and engine) and those TensorRT-LLM's own collector gives
// (trtllm_…, with engine_type), none of vLLM's or SGLang's, and the
// counts agree with the answers.
func TestMetrics_TRTLLMNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  cluster.Config
	}{
		{"aggregated-kv", cluster.Config{Engine: "trtllm", Router: "kv", Args: fast}},
		{"disagg-dp2", cluster.Config{Engine: "trtllm", Disagg: true, Args: map[string]any{"speedup_ratio": 1000, "dp_size": 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := startServer(t, tc.cfg, Options{Model: "m1"})
			hc := client(ts)
			var s sent
			for i := range 8 {
				s.send(t, hc, ts.URL, fmt.Sprintf("%s user %d", longPrefix, i%3), i%2 == 1, 1+i%4)
			}
			f := scrape(t, hc, ts.URL)
			dynamo := []string{
				"trtllm:num_requests_running", "trtllm:num_requests_waiting", "trtllm:kv_cache_usage_perc",
				"trtllm:gpu_cache_usage_perc", "trtllm:num_preemptions_total", "trtllm:time_to_first_token_seconds",
				"trtllm:inter_token_latency_seconds", "trtllm:e2e_request_latency_seconds",
			}
			native := []string{
				"trtllm_request_success_total", "trtllm_e2e_request_latency_seconds", "trtllm_time_to_first_token_seconds",
				"trtllm_time_per_output_token_seconds", "trtllm_request_queue_time_seconds",
			}
			for _, name := range append(append([]string{}, dynamo...), native...) {
				require.Contains(t, f, name)
			}
			for name := range f {
				assert.False(t, strings.HasPrefix(name, "vllm:") || strings.HasPrefix(name, "sglang:"), "%s is another engine's name", name)
			}
			// Dynamo's mocker has no prefix-cache counters for TensorRT-LLM.
			assert.NotContains(t, f, "trtllm:prefix_cache_queries_total")
			assert.NotContains(t, f, "trtllm:prefix_cache_hits_total")
			for _, name := range dynamo {
				assert.Equal(t, []string{"engine", "model_name", "worker"}, labelNames(f[name]), name)
			}
			for _, name := range native[1:] {
				assert.Equal(t, []string{"engine", "engine_type", "model_name", "worker"}, labelNames(f[name]), name)
			}
			trt := map[string]string{"model_name": "m1", "engine_type": "trtllm"}
			assert.Equal(t, float64(s.requests), sum(f["trtllm_request_success_total"], map[string]string{"finished_reason": "length", "engine_type": "trtllm"}))
			assert.Equal(t, float64(s.requests), sum(f["trtllm:time_to_first_token_seconds"], map[string]string{"model_name": "m1"}))
			assert.Equal(t, float64(s.requests), sum(f["trtllm_time_to_first_token_seconds"], trt))
			assert.Equal(t, float64(s.requests), sum(f["trtllm_request_queue_time_seconds"], trt))
			assert.Equal(t, float64(s.output-s.requests), sum(f["trtllm:inter_token_latency_seconds"], nil))
			assert.Equal(t, 6.0, sum(f["trtllm_time_per_output_token_seconds"], trt), "one per request of two or more tokens")
			assert.Zero(t, sum(f["trtllm:num_preemptions_total"], nil), "guaranteed_no_evict never preempts")
			assert.Zero(t, sum(f["trtllm:num_requests_running"], nil))
			if tc.cfg.Disagg {
				assert.Len(t, f["trtllm:num_requests_running"].Metric, 4, "one series per rank of each worker")
			}
		})
	}
}

// sendPromptsTwice sends n prompts of 128 distinct token ids (8 blocks of
// 16) to base's completions, one at a time, and then the same n again:
// prompts a small GPU pool evicts before they come back.
func sendPromptsTwice(t *testing.T, hc *http.Client, base string, n int) {
	t.Helper()
	for round := range 2 {
		for i := range n {
			ids := make([]string, 128)
			for j := range ids {
				ids[j] = fmt.Sprint(1 + i*1000 + j)
			}
			a := send(hc, base+"/v1/completions", fmt.Sprintf(`{"prompt": [%s], "max_tokens": 2}`, strings.Join(ids, ",")))
			require.NoError(t, a.err)
			require.Equal(t, http.StatusOK, a.status, "round %d prompt %d: %s", round, i, a.raw)
		}
	}
}

// TestMetrics_HostTier: a worker with a host tier shows its occupancy,
// size, and the blocks offloaded into it and onboarded from it, under
// tier G2 and medium CPU, equal to the cluster's own figures; TRT-LLM's
// host utilization is occupancy over size; without a tier no tier series
// exist.
func TestMetrics_HostTier(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"vllm", "trtllm"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			args := map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 24, "block_size": 16, "num_g2_blocks": 40}
			// Round robin sends prompt i of each round to worker i%2.
			s, ts := startServer(t, cluster.Config{Engine: engine, Workers: 2, Router: "round-robin", Args: args}, Options{})
			hc := client(ts)
			before := scrape(t, hc, ts.URL)
			g2 := map[string]string{"tier": "G2", "medium": "CPU"}
			assert.Equal(t, 80.0, sum(before["mocker_kv_tier_capacity_blocks"], g2), "40 blocks on each of two workers")
			assert.Zero(t, sum(before["mocker_kv_tier_blocks"], g2))
			// Ten prompts of 8 blocks each, twice over, five to each
			// worker: its GPU pool of 24 blocks evicts the first ones into
			// the tier before they come back.
			sendPromptsTwice(t, hc, ts.URL, 10)
			f := scrape(t, hc, ts.URL)
			st := s.Cluster().Stats()
			var offloaded uint64
			for _, w := range st.Workers {
				offloaded += w.G2Offloaded
			}
			require.Positive(t, offloaded, "the GPU pool evicted into the tier")
			require.Positive(t, st.G2Onboarded, "prompts seen before came back from the tier")
			assert.Equal(t, float64(st.G2Blocks), sum(f["mocker_kv_tier_blocks"], g2))
			assert.Equal(t, float64(st.G2Capacity), sum(f["mocker_kv_tier_capacity_blocks"], g2))
			assert.Equal(t, float64(offloaded), sum(f["mocker_kv_tier_offloaded_blocks_total"], g2))
			assert.Equal(t, float64(st.G2Onboarded), sum(f["mocker_kv_tier_onboarded_blocks_total"], g2))
			assert.Len(t, f["mocker_kv_tier_blocks"].Metric, 2, "one series per worker")
			for _, d := range TierMetricDocs {
				require.Contains(t, f, d.Name)
				assert.Equal(t, d.Type, strings.ToLower(f[d.Name].GetType().String()), "%s: the type docs/metrics.md gives", d.Name)
			}
			assert.Equal(t, []string{"engine", "medium", "model_name", "tier", "worker"}, labelNames(f["mocker_kv_tier_blocks"]))
			if engine == "trtllm" {
				for _, w := range st.Workers {
					assert.InDelta(t, float64(w.G2Blocks)/40, sum(f["trtllm_kv_cache_host_utilization"], map[string]string{"worker": w.Name}), 1e-12)
				}
			} else {
				assert.NotContains(t, f, "trtllm_kv_cache_host_utilization")
			}
		})
	}
	t.Run("disk and object tiers", func(t *testing.T) {
		t.Parallel()
		// A host tier of 8 blocks drops most of what the GPU pool evicts;
		// the disk tier and object storage keep copies of it.
		args := map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 24, "block_size": 16,
			"num_g2_blocks": 8, "num_g3_blocks": 40, "enable_g4_storage": true}
		s, ts := startServer(t, cluster.Config{Workers: 1, Args: args}, Options{})
		hc := client(ts)
		sendPromptsTwice(t, hc, ts.URL, 5)
		f := scrape(t, hc, ts.URL)
		st := s.Cluster().Stats()
		w := st.Workers[0]
		require.Positive(t, w.G3Offloaded, "the host tier's intake was copied to disk")
		require.Positive(t, st.G3Onboarded+st.G4Onboarded, "prompts dropped from the host tier came back from below it")
		g3 := map[string]string{"tier": "G3", "medium": "DISK"}
		g4 := map[string]string{"tier": "G4", "medium": "EXTERNAL"}
		assert.Equal(t, float64(w.G3Blocks), sum(f["mocker_kv_tier_blocks"], g3))
		assert.Equal(t, 40.0, sum(f["mocker_kv_tier_capacity_blocks"], g3))
		assert.Equal(t, float64(w.G3Offloaded), sum(f["mocker_kv_tier_offloaded_blocks_total"], g3))
		assert.Equal(t, float64(w.G3Onboarded), sum(f["mocker_kv_tier_onboarded_blocks_total"], g3))
		require.Positive(t, w.G4Blocks)
		assert.Equal(t, float64(w.G4Blocks), sum(f["mocker_kv_tier_blocks"], g4))
		assert.Equal(t, float64(w.G4Blocks), sum(f["mocker_kv_tier_offloaded_blocks_total"], g4), "nothing leaves object storage")
		assert.Equal(t, float64(w.G4Onboarded), sum(f["mocker_kv_tier_onboarded_blocks_total"], g4))
		for _, m := range f["mocker_kv_tier_capacity_blocks"].Metric {
			for _, l := range m.Label {
				assert.False(t, l.GetName() == "tier" && l.GetValue() == "G4", "object storage has no capacity")
			}
		}
	})
	t.Run("no tier", func(t *testing.T) {
		t.Parallel()
		_, ts := startServer(t, cluster.Config{Engine: "trtllm", Args: fast}, Options{})
		hc := client(ts)
		a := send(hc, ts.URL+"/v1/completions", `{"prompt": "hello", "max_tokens": 2}`)
		require.NoError(t, a.err)
		f := scrape(t, hc, ts.URL)
		for name := range f {
			assert.False(t, strings.HasPrefix(name, "mocker_kv_tier_"), "%s without a tier", name)
		}
		assert.NotContains(t, f, "trtllm_kv_cache_host_utilization")
	})
}
