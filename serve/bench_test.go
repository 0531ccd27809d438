package serve

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/cputime"
)

// benchPrompt is a completions body of 128 token ids, the first one
// varied by n so that no two requests share a cached block.
func benchPrompt(n uint64, maxTokens int, stream bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"mocker","prompt":[`)
	b.WriteString(strconv.FormatUint(n%4_000_000_000, 10))
	b.WriteString(strings.Repeat(",17", 127))
	fmt.Fprintf(&b, `],"max_tokens":%d,"stream":%v}`, maxTokens, stream)
	return b.Bytes()
}

// bareHandler answers like serve without a cluster: it reads the body
// and writes a fixed answer of the same shape (one JSON body, or tokens
// SSE chunks flushed one by one, gap apart): the cost of net/http itself,
// the baseline beside serve's figures.
func bareHandler(tokens int, gap time.Duration) http.Handler {
	body := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"mocker","choices":[{"index":0,"text":"the cache holds blocks while decode waits for room and prefill keeps its KV pinned until a transfer ends or","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":128,"total_tokens":144,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":0}}}`)
	chunk := []byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"mocker","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}]}` + "\n\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		if bytes.Contains(data, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			for range tokens {
				if gap > 0 {
					time.Sleep(gap)
				}
				_, _ = w.Write(chunk)
				f.Flush()
			}
			_, _ = w.Write([]byte("data: [DONE]\n\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}

// hammer sends b.N requests from parallel clients to url and reports the
// process's CPU per request and per streamed token (client and server
// alike: the bare handler's figures, measured the same way, are the
// part that is not serve's).
func hammer(b *testing.B, url string, maxTokens int, stream bool) {
	b.Helper()
	b.ReportAllocs()
	hammerWith(b, url, maxTokens, stream, cputime.Self)
}

// hammerWith sends b.N requests to url from 32 parallel clients per CPU
// and reports the CPU cpu counts per request and, streamed, per token and
// the chunks per request (cpu reads this process's or another's).
func hammerWith(b *testing.B, url string, maxTokens int, stream bool, cpu func() time.Duration) {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var seq atomic.Uint64
	var tokens atomic.Int64
	b.SetParallelism(32)
	cpu0 := cpu()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Post(url, "application/json", bytes.NewReader(benchPrompt(seq.Add(1), maxTokens, stream)))
			if err != nil {
				b.Error(err)
				return
			}
			if stream {
				sc := bufio.NewScanner(resp.Body)
				n := int64(0)
				for sc.Scan() {
					if bytes.HasPrefix(sc.Bytes(), []byte("data: {")) {
						n++
					}
				}
				tokens.Add(n)
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	used := cpu() - cpu0
	b.ReportMetric(float64(used.Nanoseconds())/1e3/float64(b.N), "cpu_µs/req")
	if stream {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N*maxTokens), "cpu_ns/token")
		b.ReportMetric(float64(tokens.Load())/float64(b.N), "chunks/req")
	}
}

// BenchmarkServe measures CPU per request through HTTP and the cluster
// (128 prompt tokens, 16 output tokens, non-streamed, at the largest
// speedup so that pacing does not bound the rate; and 64 tokens streamed
// in real time, per token), beside a bare net/http handler writing
// answers of the same shape, in the same run.
func BenchmarkServe(b *testing.B) {
	for _, tc := range []struct {
		name      string
		maxTokens int
		stream    bool
		speedup   float64
	}{
		{"nonstream-128in-16out", 16, false, cluster.MaxSpeedupRatio},
		// Paced so that tokens leave one by one, each its own chunk
		// (chunks/req says how many did).
		{"stream-128in-64out", 64, true, 1},
	} {
		cfg := cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": tc.speedup, "max_num_seqs": 256, "num_gpu_blocks": 16384}}
		b.Run(tc.name+"/bare-net-http", func(b *testing.B) {
			ts := httptest.NewServer(bareHandler(tc.maxTokens, 0))
			defer ts.Close()
			hammer(b, ts.URL+"/v1/completions", tc.maxTokens, tc.stream)
		})
		if tc.stream {
			// Chunks a few ms apart, as serve's paced ones: each wakes
			// the writer and the reader, which back-to-back chunks do not.
			b.Run(tc.name+"/bare-net-http-paced", func(b *testing.B) {
				ts := httptest.NewServer(bareHandler(tc.maxTokens, 4*time.Millisecond))
				defer ts.Close()
				hammer(b, ts.URL+"/v1/completions", tc.maxTokens, tc.stream)
			})
		}
		b.Run(tc.name+"/serve", func(b *testing.B) {
			s, ts := startServer(b, cfg, Options{})
			hammer(b, ts.URL+"/v1/completions", tc.maxTokens, tc.stream)
			_ = s
		})
	}
}

// BenchmarkServeLatency sends one-token requests one at a time to a
// cluster paced at speedup 10 and reports how much later than the model's
// TTFT (divided by the speedup) the answers arrive, at the median and
// the 90th percentile (excess_µs): the pacing grain plus HTTP's cost,
// the figure a client's TTFT is off the model's by.
func BenchmarkServeLatency(b *testing.B) {
	const speedup = 10.0
	_, ts := startServer(b, cluster.Config{Workers: 1, Args: map[string]any{"speedup_ratio": speedup}}, Options{})
	hc := client(ts)
	excess := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		resp, err := hc.Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(benchPrompt(uint64(i), 1, false)))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		wall := time.Since(start)
		ttft, err := strconv.ParseFloat(resp.Header.Get(HeaderTTFT), 64)
		if err != nil {
			b.Fatal(err)
		}
		excess = append(excess, float64(wall.Microseconds())-ttft*1e3/speedup)
	}
	b.StopTimer()
	slices.Sort(excess)
	b.ReportMetric(excess[len(excess)/2], "p50_excess_µs")
	b.ReportMetric(excess[len(excess)*9/10], "p90_excess_µs")
}

// BenchmarkServeStreams holds 2,000 streams open at once (256 tokens each)
// on eight workers paced at speedup 10, and reports the paced loop's peak
// lag behind the wall clock as a fraction of the run (lag_frac; the
// cluster falls behind when the host cannot keep up), how late the
// client's tokens came against their modeled instants (late_mean_ms,
// late_p99_ms), the CPU per streamed token, and the cores the run needs
// to keep pace (cpu_frac).
// In process, the CPU is the client's and the server's; with the server
// in a child process (server-child), the server's alone, on the
// benchmark's Ps (-cpu 1: one P).
func BenchmarkServeStreams(b *testing.B) {
	cfg := streamsConfig()
	b.Run("in-process", func(b *testing.B) {
		s, ts := startServer(b, cfg, Options{})
		streamsRun(b, ts.URL, cputime.Self, func() time.Duration {
			_, peak := s.Cluster().ClockLag()
			return peak
		})
	})
	b.Run("server-child", func(b *testing.B) {
		base := startBenchChild(b, "streams")
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		streamsRun(b, base, func() time.Duration { return childCPU(b, hc, base) },
			func() time.Duration { return childDuration(b, hc, base+lagPath) })
	})
}

// streamsStreams, streamsTokens and streamsSpeedup are
// BenchmarkServeStreams's load: streams at once, tokens each, and the
// cluster's speedup_ratio.
const streamsStreams, streamsTokens, streamsSpeedup = 2000, 256, 10

// streamsConfig is BenchmarkServeStreams's cluster.
func streamsConfig() cluster.Config {
	return cluster.Config{Workers: 8, Args: map[string]any{"speedup_ratio": streamsSpeedup, "max_num_seqs": 256, "num_gpu_blocks": 16384}}
}

// streamsRun opens BenchmarkServeStreams's streams to the server at base
// b.N times and reports the figures: cpu reads the CPU that counts, lag
// the server's peak clock lag.
func streamsRun(b *testing.B, base string, cpu, lag func() time.Duration) {
	const streams, tokens, speedup = streamsStreams, streamsTokens, streamsSpeedup
	tr := &http.Transport{MaxIdleConnsPerHost: streams}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var run time.Duration
	var failed atomic.Int64
	// The last run's, from its start: when each stream was sent, and when
	// each of its tokens (a chunk each) reached the client.
	sent := make([]time.Duration, streams)
	arrived := make([][]time.Duration, streams)
	first := uint64(0) // the last run's first prompt: each run's are fresh
	cpu0 := cpu()
	for b.Loop() {
		start := time.Now()
		done := make(chan struct{}, streams)
		for i := range streams {
			go func() {
				defer func() { done <- struct{}{} }()
				sent[i] = time.Since(start)
				arrived[i] = arrived[i][:0]
				resp, err := hc.Post(base+"/v1/completions", "application/json", bytes.NewReader(benchPrompt(first+uint64(i), tokens, true)))
				if err != nil {
					failed.Add(1)
					return
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if bytes.HasPrefix(sc.Bytes(), []byte("data: {")) {
						arrived[i] = append(arrived[i], time.Since(start))
					}
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}()
		}
		for range streams {
			<-done
		}
		run += time.Since(start)
		first += streams
	}
	first -= streams
	used := cpu() - cpu0
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d streams failed", n)
	}
	b.ReportMetric(lag().Seconds()/run.Seconds()*float64(b.N), "lag_frac")
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N*streams*tokens), "cpu_ns/token")
	b.ReportMetric(run.Seconds()/float64(b.N), "s/run")
	// The lag says how the host kept up, and a host shared with other
	// work falls behind whatever serve costs. What serve asks of it is
	// host-free: the CPU per run over the paced wall time the model gives
	// the run (its modeled span over the speedup, from the last run's
	// arrivals, at the instants they were sent, on virtual time): the
	// cores that keep pace (cpu_frac).
	b.StopTimer()
	arrivals := make([]cluster.Arrival, streams)
	for i := range arrivals {
		ids := make([]uint32, 128)
		ids[0] = uint32(first + uint64(i))
		for k := 1; k < len(ids); k++ {
			ids[k] = 17
		}
		arrivals[i] = cluster.Arrival{AtMs: sent[i].Seconds() * 1e3 * speedup, Request: cluster.Request{Tokens: ids, MaxTokens: tokens}}
	}
	v, err := cluster.RunVirtual(streamsConfig(), arrivals, cluster.VirtualOptions{})
	if err != nil {
		b.Fatal(err)
	}
	span := 0.0
	for i, r := range v.Results {
		span = max(span, arrivals[i].AtMs+r.E2EMs)
	}
	// What a client sees: how much later than its modeled instant over
	// the speedup each token of the last run reached the client (the
	// loop's lag, the pacing grain, the writes and the reads), mean and
	// p99 over all tokens. A token's modeled instant is its request's
	// arrival plus its TTFT for the first, its E2E for the last, and
	// evenly spaced between (the request's mean ITL apart).
	late := make([]float64, 0, streams*tokens)
	for i, r := range v.Results {
		if r.OutputTokens < 1 || len(arrived[i]) < r.OutputTokens {
			b.Fatalf("stream %d: %d chunks, %d tokens modeled", i, len(arrived[i]), r.OutputTokens)
		}
		itl := 0.0
		if r.OutputTokens > 1 {
			itl = (r.E2EMs - r.TTFTMs) / float64(r.OutputTokens-1)
		}
		for k := range r.OutputTokens {
			at := arrivals[i].AtMs + r.TTFTMs + float64(k)*itl
			late = append(late, float64(arrived[i][k].Microseconds())/1e3-at/speedup)
		}
	}
	slices.Sort(late)
	mean := 0.0
	for _, l := range late {
		mean += l / float64(len(late))
	}
	b.ReportMetric(mean, "late_mean_ms")
	b.ReportMetric(late[len(late)*99/100], "late_p99_ms")
	paced := span / 1e3 / speedup
	b.ReportMetric(paced, "paced_s/run")
	b.ReportMetric(used.Seconds()/float64(b.N)/paced, "cpu_frac")
}

// BenchmarkServePD measures CPU per disaggregated request (128 prompt
// tokens, 16 output tokens, non-streamed) driven over HTTP as an outside
// router drives it: a prefill with do_remote_decode to the prefill
// worker's endpoint, then the decode with the returned params to the
// decode worker's (two HTTP requests and a transfer over the prefill's
// transfer server). Beside it, in the same run: the same cluster with the
// request routed whole through the main endpoint (one HTTP request, the
// same handoff inside), and a bare net/http handler answering two
// requests of the same shape.
func BenchmarkServePD(b *testing.B) {
	cfg := func() cluster.Config {
		// An hour's hold deadlines at speedup 1000: no prefill's hold runs
		// out before its decode comes, however loaded the host.
		return cluster.Config{Disagg: true, Args: map[string]any{"speedup_ratio": 1000, "max_num_seqs": 256,
			"num_gpu_blocks": 16384, "kv_transfer_abort_timeout_ms": 3_600_000, "handoff_session_timeout_ms": 3_600_000}}
	}
	b.Run("bare-net-http-x2", func(b *testing.B) {
		ts := httptest.NewServer(bareHandler(16, 0))
		defer ts.Close()
		pdHammer(b, ts.URL, ts.URL, false)
	})
	b.Run("routed-disagg", func(b *testing.B) {
		_, ts := startServer(b, cfg(), Options{})
		hammer(b, ts.URL+"/v1/completions", 16, false)
	})
	b.Run("pd-over-http", func(b *testing.B) {
		s, _ := startServer(b, cfg(), Options{})
		var urls []string
		for _, w := range s.Workers() {
			ts := httptest.NewServer(w.Handler)
			defer ts.Close()
			urls = append(urls, ts.URL)
		}
		pdHammer(b, urls[0], urls[1], true)
	})
}

// pdHammer sends b.N prefill/decode pairs from parallel clients and
// reports the process's CPU per pair; with params set the decode carries
// the prefill's kv_transfer_params.
func pdHammer(b *testing.B, prefillURL, decodeURL string, params bool) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var seq atomic.Uint64
	b.SetParallelism(32)
	b.ReportAllocs()
	cpu0 := cputime.Self()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			body := benchPrompt(n, 1, false)
			pre := bytes.Replace(body, []byte(`"stream":false}`), []byte(`"stream":false,"kv_transfer_params":{"do_remote_decode":true}}`), 1)
			resp, err := hc.Post(prefillURL+"/v1/completions", "application/json", bytes.NewReader(pre))
			if err != nil {
				b.Error(err)
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("prefill: status %d: %s", resp.StatusCode, out)
				return
			}
			dec := benchPrompt(n, 16, false)
			if params {
				i := bytes.Index(out, []byte(`"kv_transfer_params":`))
				if i < 0 {
					b.Errorf("prefill: no kv_transfer_params: %s", out)
					return
				}
				// The params are the answer's last field: through the
				// answer's closing brace, which the decode's body takes.
				kvp := bytes.TrimSpace(out[i:])
				dec = append(append(bytes.TrimSuffix(dec, []byte("}")), ','), kvp...)
			}
			resp, err = hc.Post(decodeURL+"/v1/completions", "application/json", bytes.NewReader(dec))
			if err != nil {
				b.Error(err)
				return
			}
			out, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("decode: status %d: %s", resp.StatusCode, out)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(b.N), "cpu_µs/req")
}

// discardFlusher is a response that keeps nothing: the handler's own
// work on a stream, without net/http's or the socket's.
type discardFlusher struct{ h http.Header }

func (d *discardFlusher) Header() http.Header         { return d.h }
func (d *discardFlusher) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardFlusher) WriteHeader(int)             {}
func (d *discardFlusher) Flush()                      {}

// BenchmarkServeStreamHandler measures the stream handler's own CPU and
// allocations per stream of 256 tokens heard all at once (as a lagging
// loop delivers them, or a fast model within one grain) and written to a
// response that discards them: the chunks' encoding and the handler's
// buffers, without net/http.
func BenchmarkServeStreamHandler(b *testing.B) {
	const tokens = 256
	s, _ := startServer(b, cluster.Config{Workers: 1, Args: map[string]any{"speedup_ratio": cluster.MaxSpeedupRatio}}, Options{})
	run := func(_ context.Context, req cluster.Request) (cluster.Result, *apiError) {
		for i := range tokens - 1 {
			req.OnToken(i, float64(i))
		}
		return cluster.Result{Outcome: cluster.OutcomeCompleted, OutputTokens: tokens}, nil
	}
	p := &prepared{stream: true, tokens: []uint32{1, 2, 3}, maxTokens: tokens}
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	b.ReportAllocs()
	for b.Loop() {
		s.stream(&discardFlusher{h: http.Header{}}, r, p, "cmpl-1", run)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
}
