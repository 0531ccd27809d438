package serve

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/benchchild"
	"github.com/kvstrand/mocker/internal/cputime"
)

// benchChildEnv makes the test binary serve for BenchmarkServeServerCPU
// instead of running tests (TestMain): its value says what it serves
// ("bare", "bare-paced", "serve:SPEEDUP", or "streams":
// BenchmarkServeStreams's cluster). The server then runs in a process of its
// own, and the benchmark reads that process's CPU time alone, the client's
// left out.
const benchChildEnv = "MOCKER_SERVE_BENCH_CHILD"

// benchChildProfileEnv, set to a file name, has the serving child write a
// CPU profile of its serving there (the server's side alone, the client
// left out): MOCKER_SERVE_BENCH_CPUPROFILE=/tmp/serve.prof go test -bench
// ServeServerCPU/stream ./serve. Each child of a run overwrites it: pick
// one benchmark.
const benchChildProfileEnv = "MOCKER_SERVE_BENCH_CPUPROFILE"

// cpuPath answers the serving child's CPU time so far, in nanoseconds;
// lagPath its cluster's peak clock lag (0 for a bare handler).
const cpuPath, lagPath = "/_bench/cpu", "/_bench/lag"

// serveBenchChild serves what its environment names on a loopback port it
// prints, until its stdin closes.
func serveBenchChild(what string) int {
	var h http.Handler
	var s *Server
	switch {
	case what == "bare":
		h = bareHandler(64, 0)
	case what == "bare-paced":
		// Chunks a few ms apart, as serve's paced ones: each wakes the
		// writer, which back-to-back chunks do not.
		h = bareHandler(64, 4*time.Millisecond)
	case strings.HasPrefix(what, "serve:"):
		speedup, err := strconv.ParseFloat(strings.TrimPrefix(what, "serve:"), 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		s, err = New(cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": speedup, "max_num_seqs": 256, "num_gpu_blocks": 16384}}, Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		h = s.Handler()
	case what == "streams":
		var err error
		s, err = New(streamsConfig(), Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		h = s.Handler()
	default:
		fmt.Fprintf(os.Stderr, "%s: want bare, bare-paced, serve:SPEEDUP or streams, got %q\n", benchChildEnv, what)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET "+cpuPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(cputime.Self().Nanoseconds(), 10))
	})
	mux.HandleFunc("GET "+lagPath, func(w http.ResponseWriter, _ *http.Request) {
		var peak time.Duration
		if s != nil {
			_, peak = s.Cluster().ClockLag()
		}
		_, _ = io.WriteString(w, strconv.FormatInt(peak.Nanoseconds(), 10))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if path := os.Getenv(benchChildProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		// A finer rate than pprof's default 100 Hz: the server's share
		// of a benchmark is a second or two. (StartCPUProfile then says
		// on stderr that the rate was set already.)
		runtime.SetCPUProfileRate(1000)
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	go func() { _ = hs.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = hs.Close()
	if s != nil {
		_ = s.Close()
	}
	return 0
}

// startBenchChild runs serveBenchChild(what) in a child process and
// returns its base URL.
func startBenchChild(b *testing.B, what string) string {
	b.Helper()
	return "http://" + benchchild.Start(b, benchChildEnv+"="+what)
}

// childCPU is the serving child's CPU time so far.
func childCPU(b *testing.B, hc *http.Client, base string) time.Duration {
	b.Helper()
	return childDuration(b, hc, base+cpuPath)
}

// childDuration reads a duration in nanoseconds that the serving child
// answers at url.
func childDuration(b *testing.B, hc *http.Client, url string) time.Duration {
	b.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	ns, err := strconv.ParseInt(string(out), 10, 64)
	if err != nil {
		b.Fatalf("%s: %v (%q)", url, err, out)
	}
	return time.Duration(ns)
}

// BenchmarkServeServerCPU measures the server's CPU alone (it runs in a
// child process; the client here is left out) per non-streamed request
// (128 prompt tokens in, 16 out, at the largest speedup so that pacing
// does not bound the rate) and per streamed token (128 in, 64 out, paced
// at speedup 1 so that tokens leave one write each, and at speedup 10),
// beside a bare
// net/http handler answering the same shapes in the same run
// (cpu_µs/req, cpu_ns/token).
func BenchmarkServeServerCPU(b *testing.B) {
	for _, tc := range []struct {
		name      string
		maxTokens int
		stream    bool
		serve     string
	}{
		{"nonstream-128in-16out", 16, false, "serve:" + strconv.FormatFloat(cluster.MaxSpeedupRatio, 'g', -1, 64)},
		{"stream-128in-64out", 64, true, "serve:1"},
		// At speedup 10 a lone stream's tokens come well inside the
		// pacing grain of one another: those ready together leave in
		// one write.
		{"stream-128in-64out-speedup10", 64, true, "serve:10"},
	} {
		b.Run(tc.name+"/bare-net-http", func(b *testing.B) {
			childHammer(b, startBenchChild(b, "bare"), tc.maxTokens, tc.stream)
		})
		if tc.stream {
			b.Run(tc.name+"/bare-net-http-paced", func(b *testing.B) {
				childHammer(b, startBenchChild(b, "bare-paced"), tc.maxTokens, tc.stream)
			})
		}
		b.Run(tc.name+"/serve", func(b *testing.B) {
			childHammer(b, startBenchChild(b, tc.serve), tc.maxTokens, tc.stream)
		})
	}
}

// childHammer sends b.N requests from parallel clients to the serving
// child at base and reports the child's CPU per request and, streamed,
// per token.
func childHammer(b *testing.B, base string, maxTokens int, stream bool) {
	b.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	hammerWith(b, base+"/v1/completions", maxTokens, stream, func() time.Duration { return childCPU(b, hc, base) })
}

// BenchmarkServeHandler measures serve's own CPU per non-streamed request
// (128 prompt tokens in, 16 out, at the largest speedup) with no network:
// the handler called directly with a recorded response, through the
// cluster, from parallel callers. What it reports beside
// BenchmarkServeServerCPU's serve figure is the share of net/http and the
// socket.
func BenchmarkServeHandler(b *testing.B) {
	s, _ := startServer(b, cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": cluster.MaxSpeedupRatio, "max_num_seqs": 256, "num_gpu_blocks": 16384}}, Options{})
	h := s.Handler()
	var seq atomic.Uint64
	b.SetParallelism(32)
	b.ReportAllocs()
	cpu0 := cputime.Self()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := benchPrompt(seq.Add(1), 16, false)
			r, err := http.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cputime.Self()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu_µs/req")
}
