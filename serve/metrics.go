package serve

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvstrand/mocker/cluster"
)

// Histogram buckets, as vLLM and SGLang define them.
var (
	vllmTTFTBuckets    = []float64{.001, .005, .01, .02, .04, .06, .08, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	vllmITLBuckets     = []float64{.01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	vllmRequestBuckets = []float64{.3, .5, .8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	sglangTTFTBuckets  = []float64{.1, .2, .4, .6, .8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	sglangITLBuckets   = []float64{.002, .004, .006, .008, .01, .015, .02, .025, .03, .035, .04, .06, .08, .1, .2, .4, .6, .8, 1, 2, 4, 6, 8}
	sglangE2EBuckets   = []float64{.1, .2, .4, .6, .8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800, 1200, 1600, 2400}
	lagBuckets         = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}
)

// workerKey names one data-parallel rank of a worker.
type workerKey struct {
	name string
	rank int
}

// tokenCounts are one rank's request counters.
type tokenCounts struct {
	prompt, generation, cached, requests float64
	finished                             map[string]float64
}

// flavor is the engine whose metric names a server publishes.
type flavor uint8

const (
	flavorVLLM flavor = iota
	// flavorTRTLLM publishes Dynamo's mocker names for TensorRT-LLM (the
	// vLLM set under trtllm:) and TensorRT-LLM's own (trtllm_…).
	flavorTRTLLM
	flavorSGLang
)

func flavorOf(engine string) flavor {
	switch engine {
	case "sglang":
		return flavorSGLang
	case "trtllm":
		return flavorTRTLLM
	default:
		return flavorVLLM
	}
}

// metrics are the server's Prometheus metrics: vLLM's names (vllm:…) when
// the cluster's engine is vllm, SGLang's (sglang:…) when it is sglang, and
// for trtllm the vLLM set Dynamo's mocker publishes under trtllm: beside
// the names TensorRT-LLM's own collector gives (trtllm_…, with its label
// engine_type); each with the labels model_name, engine (the
// data-parallel rank, as vLLM labels it) and worker (the cluster's name
// for the worker: one endpoint serves them all); and mocker's own.
// Latencies are modeled seconds, the model's figures whatever the speedup.
type metrics struct {
	s      *Server
	flavor flavor

	mu     sync.Mutex
	counts map[workerKey]*tokenCounts
	// obs are each rank's histograms bound to its labels, looked up once
	// at start rather than per request.
	obs map[workerKey]*rankObservers

	ttft, itl, e2e, prefill, decode *prometheus.HistogramVec
	queue                           *prometheus.HistogramVec // vLLM only
	// TensorRT-LLM's own histograms (trtllm_…), trtllm only.
	nativeTTFT, nativeE2E, nativeTPOT, nativeQueue *prometheus.HistogramVec
	streamLag                                      prometheus.Histogram
	injected                                       *prometheus.CounterVec

	descs map[string]*prometheus.Desc
}

var (
	labels = []string{"model_name", "engine", "worker"}
	// nativeLabels are those of TensorRT-LLM's own names: its collector's
	// model_name and engine_type, and serve's engine and worker.
	nativeLabels = []string{"model_name", "engine_type", "engine", "worker"}
	// tierLabels are those of the lower KV tiers' series: the tier as
	// Dynamo's KVBM numbers it (G2) and its medium as KV events name it
	// (CPU), so that another tier is another label value.
	tierLabels = append(append([]string{}, labels...), "tier", "medium")
)

// rankObservers are one rank's latency histograms, label values bound
// (those a flavor does not publish nil).
type rankObservers struct {
	ttft, itl, e2e, prefill, queue, decode         prometheus.Observer
	nativeTTFT, nativeE2E, nativeTPOT, nativeQueue prometheus.Observer
}

// observers are k's histograms: bound at start for every rank, looked up
// by label for any other (none is expected).
func (m *metrics) observers(k workerKey) *rankObservers {
	if o := m.obs[k]; o != nil {
		return o
	}
	return m.bind(k)
}

func (m *metrics) bind(k workerKey) *rankObservers {
	lv := m.labelValues(k)
	o := &rankObservers{ttft: m.ttft.WithLabelValues(lv...), itl: m.itl.WithLabelValues(lv...), e2e: m.e2e.WithLabelValues(lv...)}
	if m.prefill != nil {
		o.prefill = m.prefill.WithLabelValues(lv...)
		o.queue = m.queue.WithLabelValues(lv...)
		o.decode = m.decode.WithLabelValues(lv...)
	}
	if m.nativeTTFT != nil {
		nv := m.nativeLabelValues(k)
		o.nativeTTFT = m.nativeTTFT.WithLabelValues(nv...)
		o.nativeE2E = m.nativeE2E.WithLabelValues(nv...)
		o.nativeTPOT = m.nativeTPOT.WithLabelValues(nv...)
		o.nativeQueue = m.nativeQueue.WithLabelValues(nv...)
	}
	return o
}

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, flavor: flavorOf(s.engine), counts: map[workerKey]*tokenCounts{}, obs: map[workerKey]*rankObservers{}, descs: map[string]*prometheus.Desc{}}
	hist := func(name, help string, buckets []float64, labelNames []string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labelNames)
		s.reg.MustRegister(h)
		return h
	}
	const (
		ttftHelp = "Time to first token in modeled seconds."
		itlHelp  = "Gap between output tokens in modeled seconds (each request's mean gap, once per gap)."
		e2eHelp  = "Arrival to last token in modeled seconds."
	)
	switch m.flavor {
	case flavorVLLM:
		m.ttft = hist("vllm:time_to_first_token_seconds", ttftHelp, vllmTTFTBuckets, labels)
		m.itl = hist("vllm:inter_token_latency_seconds", itlHelp, vllmITLBuckets, labels)
		m.e2e = hist("vllm:e2e_request_latency_seconds", e2eHelp, vllmRequestBuckets, labels)
		m.prefill = hist("vllm:request_prefill_time_seconds", "First scheduled to first token in modeled seconds (prefill compute).", vllmRequestBuckets, labels)
		m.queue = hist("vllm:request_queue_time_seconds", "Arrival to first scheduled in modeled seconds (time in the waiting queue).", vllmRequestBuckets, labels)
		m.decode = hist("vllm:request_decode_time_seconds", "First token to last token in modeled seconds.", vllmRequestBuckets, labels)
	case flavorTRTLLM:
		// Dynamo's mocker gives TensorRT-LLM vLLM's histograms and buckets.
		m.ttft = hist("trtllm:time_to_first_token_seconds", ttftHelp, vllmTTFTBuckets, labels)
		m.itl = hist("trtllm:inter_token_latency_seconds", itlHelp, vllmITLBuckets, labels)
		m.e2e = hist("trtllm:e2e_request_latency_seconds", e2eHelp, vllmRequestBuckets, labels)
		// TensorRT-LLM's collector has vLLM's buckets too.
		m.nativeTTFT = hist("trtllm_time_to_first_token_seconds", ttftHelp, vllmTTFTBuckets, nativeLabels)
		m.nativeE2E = hist("trtllm_e2e_request_latency_seconds", e2eHelp, vllmRequestBuckets, nativeLabels)
		m.nativeTPOT = hist("trtllm_time_per_output_token_seconds", "Mean gap between output tokens in modeled seconds, once per request of two or more tokens.", vllmITLBuckets, nativeLabels)
		m.nativeQueue = hist("trtllm_request_queue_time_seconds", "Arrival to first scheduled in modeled seconds (time in the waiting queue).", vllmRequestBuckets, nativeLabels)
	default:
		m.ttft = hist("sglang:time_to_first_token_seconds", ttftHelp, sglangTTFTBuckets, labels)
		m.itl = hist("sglang:inter_token_latency_seconds", itlHelp, sglangITLBuckets, labels)
		m.e2e = hist("sglang:e2e_request_latency_seconds", e2eHelp, sglangE2EBuckets, labels)
	}
	m.streamLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mocker_stream_lag_seconds",
		Help:    "Wall seconds from a streamed token's modeled instant (the paced loop producing it) to its chunk written and flushed to the client (including up to one pacing grain, 2 ms, a token waits to share a write with the next): a slow client's lag, never turned into modeled time.",
		Buckets: lagBuckets,
	})
	m.injected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mocker_injected_failures_total",
		Help: "Requests answered with an injected error (failure_injection_rate, or the X-Mocker-Fail header) instead of reaching the cluster, by error type.",
	}, []string{"type"})
	s.reg.MustRegister(m.streamLag, m.injected, m)

	desc := func(name, help string, labelNames []string, extra ...string) {
		m.descs[name] = prometheus.NewDesc(name, help, append(append([]string{}, labelNames...), extra...), nil)
	}
	d := func(name, help string, extra ...string) { desc(name, help, labels, extra...) }
	g := func(name, help string) { m.descs[name] = prometheus.NewDesc(name, help, nil, nil) }
	switch m.flavor {
	case flavorVLLM:
		d("vllm:num_requests_running", "Requests in the worker's running batch.")
		d("vllm:num_requests_waiting", "Requests waiting in the worker's queue.")
		d("vllm:kv_cache_usage_perc", "Fraction of the worker's KV blocks in use (held ones included), 0 to 1.")
		d("vllm:num_preemptions_total", "Requests the worker's scheduler preempted.")
		d("vllm:prompt_tokens_total", "Prompt tokens of the requests the worker prefilled.")
		d("vllm:generation_tokens_total", "Tokens generated by the requests that finished on the worker.")
		d("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the worker's prefix cache.")
		d("vllm:prefix_cache_hits_total", "Prompt tokens found in the worker's prefix cache.")
		d("vllm:request_success_total", "Requests finished on the worker, by finished_reason.", "finished_reason")
		d("vllm:cache_config_info", "The worker's KV cache config as labels; value 1.", "block_size", "num_gpu_blocks")
	case flavorTRTLLM:
		d("trtllm:num_requests_running", "Requests in the worker's running batch.")
		d("trtllm:num_requests_waiting", "Requests waiting in the worker's queue.")
		d("trtllm:kv_cache_usage_perc", "Fraction of the worker's KV blocks in use (held ones included), 0 to 1.")
		d("trtllm:gpu_cache_usage_perc", "The same fraction as trtllm:kv_cache_usage_perc, under its older name.")
		d("trtllm:num_preemptions_total", "Requests the worker's scheduler preempted (paused); always 0 under guaranteed_no_evict.")
		desc("trtllm_request_success_total", "Requests completed on the worker, by finished_reason.", nativeLabels, "finished_reason")
		desc("trtllm_kv_cache_host_utilization", "Fraction of the worker's host (G2) KV tier in use, 0 to 1; only for a worker with one.", nativeLabels)
	default:
		d("sglang:num_running_reqs", "Requests in the worker's running batch.")
		d("sglang:num_queue_reqs", "Requests waiting in the worker's queue.")
		d("sglang:token_usage", "Fraction of the worker's KV pages in use (held ones included), 0 to 1.")
		d("sglang:cache_hit_rate", "Prompt tokens found in the prefix cache over prompt tokens, since start.")
		d("sglang:prompt_tokens_total", "Prompt tokens of the requests the worker prefilled.")
		d("sglang:generation_tokens_total", "Tokens generated by the requests that finished on the worker.")
		d("sglang:cached_tokens_total", "Prompt tokens found in the worker's prefix cache.")
		d("sglang:num_requests_total", "Requests finished on the worker.")
		d("sglang:cache_config_info", "The worker's KV cache config as labels; value 1.", "page_size", "num_pages")
	}
	for _, doc := range TierMetricDocs {
		desc(doc.Name, doc.Meaning, tierLabels)
	}
	g("mocker_kv_held_blocks", "KV blocks prefill workers hold for a decode right now, cluster-wide.")
	m.descs["mocker_kv_holds_total"] = prometheus.NewDesc("mocker_kv_holds_total", "Prefill KV holds ended, by outcome: transferred, aborted (timeout) or cancelled (the request was refused or withdrawn).", []string{"outcome"}, nil)
	g("mocker_kv_aborts_total", "Prefill KV holds ended by their abort timeout (kv_transfer_abort_timeout_ms or handoff_session_timeout_ms).")
	g("mocker_prefill_refusals_total", "Requests the router refused because every prefill worker was busy (the cascade).")
	g("mocker_clock_lag_seconds", "How far the cluster's paced loop runs behind the wall clock now (wall seconds).")

	// Every rank's series exist from the start, at zero, as vLLM
	// pre-creates them.
	for _, w := range s.c.Stats().Workers {
		k := workerKey{w.Name, w.DPRank}
		m.counts[k] = &tokenCounts{finished: map[string]float64{"length": 0, "abort": 0}}
		m.obs[k] = m.bind(k)
	}
	return m
}

func (m *metrics) labelValues(k workerKey) []string {
	return []string{m.s.opts.Model, strconv.Itoa(k.rank), k.name}
}

// nativeLabelValues are k's values of nativeLabels.
func (m *metrics) nativeLabelValues(k workerKey) []string {
	return []string{m.s.opts.Model, "trtllm", strconv.Itoa(k.rank), k.name}
}

// kvTier is one KV tier below a worker rank's GPU pool, as its metrics
// show it.
type kvTier struct {
	tier, medium         string
	blocks, capacity     int
	offloaded, onboarded uint64
}

// tiersOf lists w's tiers below the GPU pool, upper first: the host tier
// (G2, on CPU memory), the disk tier (G3) when it has one, and object
// storage (G4) once it holds a block. Object storage has no bound (no
// capacity series) and nothing leaves it, so what it holds is what was
// copied in.
func tiersOf(w *cluster.WorkerStats) []kvTier {
	if w.G2Capacity == 0 {
		return nil
	}
	ts := []kvTier{{tier: "G2", medium: "CPU", blocks: w.G2Blocks, capacity: w.G2Capacity, offloaded: w.G2Offloaded, onboarded: w.G2Onboarded}}
	if w.G3Capacity > 0 {
		ts = append(ts, kvTier{tier: "G3", medium: "DISK", blocks: w.G3Blocks, capacity: w.G3Capacity, offloaded: w.G3Offloaded, onboarded: w.G3Onboarded})
	}
	if w.G4Blocks > 0 || w.G4Onboarded > 0 {
		ts = append(ts, kvTier{tier: "G4", medium: "EXTERNAL", blocks: w.G4Blocks, offloaded: uint64(w.G4Blocks), onboarded: w.G4Onboarded})
	}
	return ts
}

// observe counts one ended request: its prompt on the worker that
// prefilled it, its output and latencies on the worker that finished it.
func (m *metrics) observe(p *prepared, res *cluster.Result) {
	if res.PrefillWorker == "" {
		return // never placed on a worker
	}
	if !p.decodeHalf { // the prefill half counted it
		m.observePrompt(p, res)
	}
	dk := workerKey{res.DecodeWorker, res.DecodeDPRank}
	completed := res.Outcome == cluster.OutcomeCompleted
	m.mu.Lock()
	if c := m.counts[dk]; c != nil {
		switch {
		case completed:
			c.generation += float64(res.OutputTokens)
			c.requests++
			c.finished["length"]++
		case res.Outcome == cluster.OutcomeAborted:
			c.requests++
			c.finished["abort"]++
		}
	}
	m.mu.Unlock()
	if !completed {
		return
	}
	o := m.observers(dk)
	o.ttft.Observe(res.TTFTMs / 1e3)
	o.e2e.Observe(res.E2EMs / 1e3)
	for range res.OutputTokens - 1 {
		o.itl.Observe(res.ITLMs / 1e3)
	}
	if o.prefill != nil {
		o.prefill.Observe((res.TTFTMs - res.QueueMs) / 1e3)
		o.queue.Observe(res.QueueMs / 1e3)
		o.decode.Observe((res.E2EMs - res.TTFTMs) / 1e3)
	}
	if o.nativeTTFT != nil {
		o.nativeTTFT.Observe(res.TTFTMs / 1e3)
		o.nativeE2E.Observe(res.E2EMs / 1e3)
		o.nativeQueue.Observe(res.QueueMs / 1e3)
		if res.OutputTokens > 1 {
			o.nativeTPOT.Observe(res.ITLMs / 1e3)
		}
	}
}

// observePrompt counts a request's prompt and cache hit on the worker
// that prefilled it.
func (m *metrics) observePrompt(p *prepared, res *cluster.Result) {
	if res.PrefillWorker == "" || (res.OutputTokens == 0 && !res.HoldStarted) {
		return
	}
	m.mu.Lock()
	if c := m.counts[workerKey{res.PrefillWorker, res.PrefillDPRank}]; c != nil {
		c.prompt += float64(len(p.tokens))
		c.cached += float64(res.CachedTokens)
	}
	m.mu.Unlock()
}

// Describe sends the descriptors of the metrics Collect builds.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect reads the cluster's occupancy and counters at scrape time.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.c.Stats()
	blockSize := strconv.Itoa(m.s.c.BlockSize())
	gauge := func(name string, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.GaugeValue, v, lv...)
	}
	counter := func(name string, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, v, lv...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range st.Workers {
		k := workerKey{w.Name, w.DPRank}
		lv := m.labelValues(k)
		usage := 0.0
		if w.TotalBlocks > 0 {
			usage = float64(w.ActiveBlocks) / float64(w.TotalBlocks)
		}
		c := m.counts[k]
		if c == nil {
			continue
		}
		for _, t := range tiersOf(&w) {
			tv := append(append([]string{}, lv...), t.tier, t.medium)
			gauge("mocker_kv_tier_blocks", float64(t.blocks), tv...)
			if t.capacity > 0 {
				gauge("mocker_kv_tier_capacity_blocks", float64(t.capacity), tv...)
			}
			counter("mocker_kv_tier_offloaded_blocks_total", float64(t.offloaded), tv...)
			counter("mocker_kv_tier_onboarded_blocks_total", float64(t.onboarded), tv...)
		}
		switch m.flavor {
		case flavorVLLM:
			info := append(append([]string{}, lv...), blockSize, strconv.Itoa(w.TotalBlocks))
			gauge("vllm:num_requests_running", float64(w.Running), lv...)
			gauge("vllm:num_requests_waiting", float64(w.Waiting), lv...)
			gauge("vllm:kv_cache_usage_perc", usage, lv...)
			counter("vllm:num_preemptions_total", float64(w.Preemptions), lv...)
			counter("vllm:prompt_tokens_total", c.prompt, lv...)
			counter("vllm:generation_tokens_total", c.generation, lv...)
			counter("vllm:prefix_cache_queries_total", c.prompt, lv...)
			counter("vllm:prefix_cache_hits_total", c.cached, lv...)
			for _, reason := range []string{"length", "abort"} {
				counter("vllm:request_success_total", c.finished[reason], append(append([]string{}, lv...), reason)...)
			}
			gauge("vllm:cache_config_info", 1, info...)
		case flavorTRTLLM:
			nv := m.nativeLabelValues(k)
			gauge("trtllm:num_requests_running", float64(w.Running), lv...)
			gauge("trtllm:num_requests_waiting", float64(w.Waiting), lv...)
			gauge("trtllm:kv_cache_usage_perc", usage, lv...)
			gauge("trtllm:gpu_cache_usage_perc", usage, lv...)
			counter("trtllm:num_preemptions_total", float64(w.Preemptions), lv...)
			// TensorRT-LLM counts successes only: an aborted request is
			// not one.
			counter("trtllm_request_success_total", c.finished["length"], append(append([]string{}, nv...), "length")...)
			if w.G2Capacity > 0 {
				gauge("trtllm_kv_cache_host_utilization", float64(w.G2Blocks)/float64(w.G2Capacity), nv...)
			}
		default:
			info := append(append([]string{}, lv...), blockSize, strconv.Itoa(w.TotalBlocks))
			rate := 0.0
			if c.prompt > 0 {
				rate = c.cached / c.prompt
			}
			gauge("sglang:num_running_reqs", float64(w.Running), lv...)
			gauge("sglang:num_queue_reqs", float64(w.Waiting), lv...)
			gauge("sglang:token_usage", usage, lv...)
			gauge("sglang:cache_hit_rate", rate, lv...)
			counter("sglang:prompt_tokens_total", c.prompt, lv...)
			counter("sglang:generation_tokens_total", c.generation, lv...)
			counter("sglang:cached_tokens_total", c.cached, lv...)
			counter("sglang:num_requests_total", c.requests, lv...)
			gauge("sglang:cache_config_info", 1, info...)
		}
	}
	gauge("mocker_kv_held_blocks", float64(st.HeldBlocks))
	counter("mocker_kv_holds_total", float64(st.HoldsReleased), "transferred")
	counter("mocker_kv_holds_total", float64(st.HoldsAborted), "aborted")
	counter("mocker_kv_holds_total", float64(st.HoldsCancelled), "cancelled")
	counter("mocker_kv_aborts_total", float64(st.HoldsAborted))
	counter("mocker_prefill_refusals_total", float64(st.PrefillRejections))
	lag, _ := m.s.c.ClockLag()
	gauge("mocker_clock_lag_seconds", lag.Seconds())
}
