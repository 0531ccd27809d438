package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvstrand/mocker/internal/benchchild"
	"github.com/kvstrand/mocker/internal/cputime"
)

// benchServerEnv makes the test binary serve HTTP for the benchmarks
// instead of running tests (see TestMain): the server runs in a process of
// its own, so that the benchmark's CPU time is the client's alone.
const benchServerEnv = "MOCKER_HARNESS_BENCH_SERVER"

// serveForBenchmarks serves /get (a small body) and /stream?n=N&gap=D (N
// SSE events D apart) on a loopback port it prints, until stdin closes.
func serveForBenchmarks() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	body := strings.Repeat("x", 128)
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		gap, _ := time.ParseDuration(r.URL.Query().Get("gap"))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		// Event i goes out at start + (i+1)*gap whatever the delays
		// before it, so a stream lasts n*gap unless the reader (or this
		// host) falls behind, and its duration measures that.
		start := time.Now()
		timer := time.NewTimer(gap)
		defer timer.Stop()
		for i := range n {
			select {
			case <-r.Context().Done():
				return
			case <-timer.C:
			}
			fmt.Fprintf(w, "id: %d\ndata: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n", i)
			fl.Flush()
			timer.Reset(time.Until(start.Add(time.Duration(i+2) * gap)))
		}
	})
	// /cpu is the server process's CPU time so far, in microseconds.
	mux.HandleFunc("/cpu", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, cputime.Self().Microseconds())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// startBenchServer runs serveForBenchmarks in a child process and
// returns its base URL.
func startBenchServer(b *testing.B) string {
	b.Helper()
	return "http://" + benchchild.Start(b, benchServerEnv+"=1")
}

// BenchmarkHTTPGet measures the CPU time this process spends per GET
// against a keep-alive server in another process: a bare net/http client
// loop (the baseline), the same loop timing each request as k6 does, and
// the harness running http.get in a script (1 VU, and 100), with its
// samples and response object. cpu-µs/req is the figure.
func BenchmarkHTTPGet(b *testing.B) {
	base := startBenchServer(b)
	b.Run("NetHTTPClient", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		defer client.CloseIdleConnections()
		cpu0 := cputime.Self()
		b.ResetTimer()
		for range b.N {
			resp, err := client.Get(base + "/get")
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
	})
	// The bare loop plus what k6's semantics ask of every request: its
	// phases timed through httptrace and its own timeout.
	b.Run("NetHTTPClientTimed", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		defer client.CloseIdleConnections()
		var mu sync.Mutex
		var stamps [6]time.Time
		now := func(i int) {
			mu.Lock()
			stamps[i] = time.Now()
			mu.Unlock()
		}
		cpu0 := cputime.Self()
		b.ResetTimer()
		for range b.N {
			now(0)
			trace := &httptrace.ClientTrace{
				ConnectStart:         func(string, string) { now(1) },
				ConnectDone:          func(string, string, error) { now(1) },
				GotConn:              func(httptrace.GotConnInfo) { now(2) },
				WroteRequest:         func(httptrace.WroteRequestInfo) { now(3) },
				GotFirstResponseByte: func() { now(4) },
			}
			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), time.Minute)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/get", nil)
			if err != nil {
				b.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			now(5)
			cancel()
		}
		b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
	})
	// The harness, with one VU and with 100 sharing the iterations (each
	// VU with a keep-alive connection of its own); peak-heap-KiB/VU is
	// the run's largest heap in use over its VUs.
	for _, vus := range []int64{1, 100} {
		name := "Harness"
		if vus > 1 {
			name = fmt.Sprintf("Harness%dVUs", vus)
		}
		b.Run(name, func(b *testing.B) {
			script := filepath.Join(b.TempDir(), "get.js")
			src := `import http from 'k6/http';
export default function () { http.get(__ENV.BASE_URL + '/get'); }`
			if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
				b.Fatal(err)
			}
			n := max(int64(b.N), vus) // each VU makes a request at least
			cfg := Config{
				Script: script, Quiet: true, Stdout: io.Discard, Stderr: io.Discard, Clock: ClockWall,
				Env:       map[string]string{"BASE_URL": base},
				Overrides: Overrides{VUs: ptr(vus), Iterations: &n},
			}
			cpu0 := cputime.Self()
			b.ResetTimer()
			var err error
			peak := peakHeap(func() { err = Run(context.Background(), cfg) })
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(n), "cpu-µs/req")
			b.ReportMetric(float64(peak)/float64(vus)/1024, "peak-heap-KiB/VU")
		})
	}
}

// BenchmarkSSEStreams runs 1,000 VUs, each reading one stream of 100
// events/s for 2 s (100,000 events/s in all) from a server in another
// process. It reports the harness's CPU time per event and what that
// makes of a core at 100,000 events/s, the server's CPU per event beside
// it (both share this host's cores), and whether the streams were
// sustained: the mean stream lasted 2,000 ms and the mean gap between a
// stream's events was 10 ms when the reading kept up, and delivered/sent
// is the event rate the streams achieved over the rate sent (1 when
// sustained; a loaded host shows less).
func BenchmarkSSEStreams(b *testing.B) {
	const streams, perStream, gap = 1000, 200, 10 * time.Millisecond
	base := startBenchServer(b)
	script := filepath.Join(b.TempDir(), "sse.js")
	src := fmt.Sprintf(`import sse from 'k6/x/sse';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: %d, iterations: 1, maxDuration: '120s' } } };
export default function () {
  sse.open(__ENV.BASE_URL + '/stream?n=%d&gap=%s', {}, (c) => { c.on('event', (e) => {}); });
}`, streams, perStream, gap)
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		export := filepath.Join(b.TempDir(), "summary.json")
		cfg := Config{
			Script: script, Quiet: true, Stdout: io.Discard, Stderr: io.Discard, Clock: ClockWall,
			Env: map[string]string{"BASE_URL": base}, SummaryExport: export,
		}
		srv0 := serverCPU(b, base)
		cpu0 := cputime.Self()
		var err error
		peak := peakHeap(func() { err = Run(context.Background(), cfg) })
		if err != nil {
			b.Fatal(err)
		}
		cpu := cputime.Self() - cpu0
		srv := serverCPU(b, base) - srv0
		b.ReportMetric(float64(peak)/streams/1024, "peak-heap-KiB/VU")
		raw, err := os.ReadFile(export)
		if err != nil {
			b.Fatal(err)
		}
		f := sseFigures(raw)
		if f.events != streams*perStream {
			b.Fatalf("got %v events, want %d", f.events, streams*perStream)
		}
		perEvent := float64(cpu.Microseconds()) / f.events
		b.ReportMetric(perEvent, "cpu-µs/event")
		b.ReportMetric(perEvent*1e5/1e6, "cores@100k/s")
		b.ReportMetric(float64(srv.Microseconds())/f.events, "server-cpu-µs/event")
		b.ReportMetric(f.gap, "interval-ms")
		b.ReportMetric(f.stream, "stream-ms")
		b.ReportMetric(float64(perStream)*float64(gap.Milliseconds())/f.stream, "delivered/sent")
	}
}

// serverCPU reads the bench server's CPU time (its /cpu).
func serverCPU(b *testing.B, base string) time.Duration {
	b.Helper()
	resp, err := http.Get(base + "/cpu")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	us, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		b.Fatalf("the bench server's /cpu said %q: %v", raw, err)
	}
	return time.Duration(us) * time.Microsecond
}

// peakHeap runs f and returns the largest heap in use seen while it ran
// (sampled every 20 ms).
func peakHeap(f func()) uint64 {
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var top uint64
		var ms runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				peak <- top
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				top = max(top, ms.HeapInuse)
			}
		}
	}()
	f()
	close(done)
	return <-peak
}

// sseStats are a run's SSE figures, from its summary export.
type sseStats struct {
	events float64 // sse_event count
	gap    float64 // mean sse_event_interval, ms
	stream float64 // mean http_req_duration (the streams'), ms
}

func sseFigures(export []byte) sseStats {
	var s struct {
		Metrics map[string]map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal(export, &s); err != nil {
		return sseStats{}
	}
	return sseStats{
		events: s.Metrics["sse_event"]["count"],
		gap:    s.Metrics["sse_event_interval"]["avg"],
		stream: s.Metrics["http_req_duration"]["avg"],
	}
}
