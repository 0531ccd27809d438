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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvstrand/mocker/internal/benchchild"
	"github.com/kvstrand/mocker/internal/cputime"
)

// benchServerEnv makes the test binary serve HTTP for the benchmarks
// instead of running tests (see TestMain): the server runs in a process of
// its own, so that the benchmark's CPU time is the client's alone.
const benchServerEnv = "MOCKER_HARNESS_BENCH_SERVER"

// serveForBenchmarks serves /get (a small body), /stream (SSE events)
// and /stats on a loopback port it prints, until stdin closes.
func serveForBenchmarks() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	body := strings.Repeat("x", 128)
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
	mux.HandleFunc("/stream", streamEvents)
	// /stats is the server's CPU time so far in microseconds, the events
	// its streams have sent, and when the last group of streams was let
	// go (Unix nanoseconds; see streamEvents).
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		streams.mu.Lock()
		released := streams.released
		streams.mu.Unlock()
		fmt.Fprint(w, cputime.Self().Microseconds(), " ", streams.sent.Load(), " ", released)
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

// streams is what streamEvents keeps across requests.
var streams struct {
	sent     atomic.Int64 // events sent
	mu       sync.Mutex
	waiting  map[string]*streamGroup // groups not yet let go, by name
	released int64                   // when the last group was let go, Unix ns
}

// streamGroup is a group of streams that begin together.
type streamGroup struct {
	left    int           // streams yet to arrive
	release chan struct{} // closed when the last one has
	start   time.Time
}

// joinGroup adds a stream to the group name of size streams and returns
// it; the group's release closes once the last of them has arrived.
func joinGroup(name string, size int) *streamGroup {
	streams.mu.Lock()
	defer streams.mu.Unlock()
	if streams.waiting == nil {
		streams.waiting = map[string]*streamGroup{}
	}
	g := streams.waiting[name]
	if g == nil {
		g = &streamGroup{left: size, release: make(chan struct{})}
		streams.waiting[name] = g
	}
	if g.left--; g.left == 0 {
		g.start = time.Now()
		streams.released = g.start.UnixNano()
		delete(streams.waiting, name)
		close(g.release)
	}
	return g
}

// streamEvents is /stream?n=N&gap=D&group=G&of=M: N events D apart, in
// HTTP/1.1 chunks, as an LLM server streams tokens, the M streams of
// group G beginning together once the last of them has arrived (so that
// a client's start, its connections set up, is apart from its steady
// state). Event i of a stream goes out at start + (i+1)*D whatever the
// delays before it, so the streams last N*D unless this host falls
// behind, and a reader that falls behind finds its events queued. It
// takes the connection over and writes each event as one chunk, in one
// write, straight to the socket, so that the server's CPU per event is
// little more than the kernel's (net/http's response writer adds its
// buffering and a flush to each event); the client reads what any
// HTTP/1.1 server sends.
func streamEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, _ := strconv.Atoi(q.Get("n"))
	gap, _ := time.ParseDuration(q.Get("gap"))
	of, _ := strconv.Atoi(q.Get("of"))
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = conn.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"+
		"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		return
	}
	g := joinGroup(q.Get("group"), max(of, 1))
	<-g.release
	buf := make([]byte, 0, 128)
	for i := range n {
		time.Sleep(time.Until(g.start.Add(time.Duration(i+1) * gap)))
		ev := fmt.Appendf(nil, "id: %d\ndata: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n", i)
		buf = strconv.AppendInt(buf[:0], int64(len(ev)), 16)
		buf = append(append(append(buf, "\r\n"...), ev...), "\r\n"...)
		if _, err := conn.Write(buf); err != nil {
			return
		}
		streams.sent.Add(1)
	}
	_, _ = io.WriteString(conn, "0\r\n\r\n")
}

// BenchmarkSSEStreams runs 1,000 VUs, each reading one stream of 100
// events/s for 10 s (100,000 events/s in all, a million events) from a
// server in another process, with mocker's garbage-collector setting
// (GOGC=400). The streams begin together once all 1,000 are connected,
// so that the VUs' start is measured apart. It reports:
//   - startup-cpu-ms: the harness's CPU time until every stream was
//     connected (1,000 JavaScript runtimes, their connections);
//   - cpu-µs/event: its CPU per event after that (to the end of the
//     run), and cores@100k/s, what that makes of a core at 100,000
//     events/s;
//   - server-cpu-µs/event: the server's over the same time (it shares
//     this host's cores), and both-cores@100k/s, the cores client and
//     server took together at 100,000 events/s;
//   - delivered/sent: the event rate the streams achieved over the rate
//     sent, 10 s over the time from the streams' start to the end of
//     the slowest (its last event read): 1 when they were
//     sustained, less when this host was too slow to run client and
//     server together on time; interval-ms is the mean gap between a
//     stream's events (10 ms when sustained).
func BenchmarkSSEStreams(b *testing.B) {
	const vus, perStream, gap = 1000, 1000, 10 * time.Millisecond
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as cmd/mocker runs
	base := startBenchServer(b)
	for run := range b.N {
		script := filepath.Join(b.TempDir(), "sse.js")
		src := fmt.Sprintf(`import sse from 'k6/x/sse';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: %d, iterations: 1, maxDuration: '120s' } } };
export default function () {
  sse.open(__ENV.BASE_URL + '/stream?n=%d&gap=%s&group=%d&of=%d', {}, (c) => { c.on('event', (e) => {}); });
}`, vus, perStream, gap, run, vus)
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			b.Fatal(err)
		}
		export := filepath.Join(b.TempDir(), "summary.json")
		var end time.Time // when the last stream ended (before the summary)
		cfg := Config{
			Script: script, Quiet: true, Stdout: io.Discard, Stderr: io.Discard, Clock: ClockWall,
			Env: map[string]string{"BASE_URL": base}, SummaryExport: export,
			observeRun: func(time.Duration) { end = time.Now() },
		}
		runtime.GC()
		srv0 := mustStreamStats(b, base)
		cpu0 := cputime.Self()
		watch := watchStreams(base, srv0)
		var err error
		peak := peakHeap(func() { err = Run(context.Background(), cfg) })
		if err != nil {
			b.Fatal(err)
		}
		cpu1 := cputime.Self()
		cpuBegun, srvBegun, ok := watch()
		srv1 := mustStreamStats(b, base)
		raw, err := os.ReadFile(export)
		if err != nil {
			b.Fatal(err)
		}
		f := sseFigures(raw)
		const events = vus * perStream
		if sent := srv1.sent - srv0.sent; f.events != events || sent != events || !ok {
			b.Fatalf("got %v events of %d sent, want %d (streams let go: %v)", f.events, sent, events, ok)
		}
		steady := float64(events - (srvBegun.sent - srv0.sent)) // sent after the watch saw the start
		client := float64((cpu1 - cpuBegun).Microseconds()) / steady
		server := float64((srv1.cpu - srvBegun.cpu).Microseconds()) / steady
		b.ReportMetric(float64((cpuBegun - cpu0).Milliseconds()), "startup-cpu-ms")
		b.ReportMetric(client, "cpu-µs/event")
		b.ReportMetric(client*1e5/1e6, "cores@100k/s")
		b.ReportMetric(server, "server-cpu-µs/event")
		b.ReportMetric((client+server)*1e5/1e6, "both-cores@100k/s")
		b.ReportMetric(float64(perStream*gap)/float64(end.Sub(time.Unix(0, srv1.released))), "delivered/sent")
		b.ReportMetric(f.gap, "interval-ms")
		b.ReportMetric(float64(peak)/vus/1024, "peak-heap-KiB/VU")
	}
}

// streamCounts are the bench server's /stats.
type streamCounts struct {
	cpu      time.Duration
	sent     int64
	released int64 // Unix ns
}

func readStreamStats(base string) (streamCounts, error) {
	var c streamCounts
	resp, err := http.Get(base + "/stats")
	if err != nil {
		return c, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return c, err
	}
	var us int64
	if _, err := fmt.Sscan(string(raw), &us, &c.sent, &c.released); err != nil {
		return c, fmt.Errorf("the bench server's /stats said %q: %w", raw, err)
	}
	c.cpu = time.Duration(us) * time.Microsecond
	return c, nil
}

func mustStreamStats(b *testing.B, base string) streamCounts {
	b.Helper()
	c, err := readStreamStats(base)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// watchStreams reads the server's /stats every 10 ms until it lets a
// new group of streams go (at0: the stats before the run); the returned
// func stops it and returns this process's CPU time and the server's
// stats at that moment (ok false if it never came). Each look is one
// small request of this process's.
func watchStreams(base string, at0 streamCounts) func() (cpu time.Duration, srv streamCounts, ok bool) {
	type seen struct {
		cpu time.Duration
		srv streamCounts
		ok  bool
	}
	stop, out := make(chan struct{}), make(chan seen, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- seen{}
				return
			case <-tick.C:
			}
			if s, err := readStreamStats(base); err == nil && s.released != at0.released {
				out <- seen{cputime.Self(), s, true}
				return
			}
		}
	}()
	return func() (time.Duration, streamCounts, bool) {
		close(stop)
		s := <-out
		return s.cpu, s.srv, s.ok
	}
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
	}
}
