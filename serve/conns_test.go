package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// childEnv marks the test binary run as a serving child process.
const childEnv = "MOCKER_SERVE_CHILD"

// serveChild runs in the test binary started as a child of
// TestConns_TenThousandAtOnceBoundedMemory (childEnv set; TestMain calls
// it in place of the tests): it serves as `mocker serve` does (Listen with
// the default connection limit, the command's http.Server settings),
// prints its address, drains on SIGTERM and returns the exit code.
func serveChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := New(cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": 1000}}, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := Listen("127.0.0.1:0", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Printf("ADDR %s\n", ln.Addr())
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := 0
	if _, err := s.Drain(dctx); err != nil {
		fmt.Fprintln(os.Stderr, "drain:", err)
		code = 1
	}
	if err := hs.Shutdown(dctx); err != nil {
		fmt.Fprintln(os.Stderr, "shutdown:", err)
		code = 1
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "serve:", err)
		code = 1
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		code = 1
	}
	return code
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// connsWanted is how many connections the test opens at once: 10,000, or
// what the file limit leaves room for (raising the soft limit to the hard
// one first), less 512 for the rest of the process.
func connsWanted(t *testing.T) int {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	}
	return int(min(10000, int64(lim.Cur)-512))
}

// Bounds of TestConns_TenThousandAtOnceBoundedMemory: the serving
// process's resident memory may grow by at most this much while 10,000
// connections arrive at once (the race detector's shadow memory
// multiplies it). Served connections are bounded by DefaultMaxConns
// (4096); the rest wait in the kernel's backlog or are refused there.
const (
	connsRSSBound     = 192 << 20
	connsRSSBoundRace = 2048 << 20
)

// TestConns_TenThousandAtOnceBoundedMemory: 10,000 clients (fewer if the
// file limit cannot be raised that far; the count is logged) each open a
// connection to a serving process (`mocker serve`'s listener and HTTP
// settings, in a child process so that only the server is measured) and
// send a completion at once. Every connection is served (200) or refused
// (the dial or the read fails, or a 429/503); the server's resident memory
// grows by less than connsRSSBound; it still answers afterwards and exits
// cleanly on SIGTERM, without a panic.
func TestConns_TenThousandAtOnceBoundedMemory(t *testing.T) {
	n := connsWanted(t)
	t.Logf("connections at once: %d", n)
	require.Positive(t, n)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	require.NoError(t, err, "the child's address")
	addr := strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
	go func() { _, _ = io.Copy(io.Discard, out) }()

	body := `{"prompt": "ten thousand clients knock at once", "max_tokens": 4}`
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", addr, len(body), body)
	// One request first, so the baseline is a server that has served.
	warm, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	require.Equal(t, http.StatusOK, warm.StatusCode)
	base, err := rssBytes(cmd.Process.Pid)
	require.NoError(t, err)

	var peak atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if r, err := rssBytes(cmd.Process.Pid); err == nil && r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	// Open every connection and send its request, then read the answers.
	conns := make([]net.Conn, n)
	var refused, served, other atomic.Int64
	var wg sync.WaitGroup
	const dialers = 32
	for d := range dialers {
		wg.Go(func() {
			dialer := net.Dialer{Timeout: 3 * time.Second}
			for i := d; i < n; i += dialers {
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					refused.Add(1)
					continue
				}
				_ = c.SetDeadline(time.Now().Add(45 * time.Second))
				if _, err := io.WriteString(c, req); err != nil {
					refused.Add(1)
					_ = c.Close()
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n; i += dialers {
				c := conns[i]
				if c == nil {
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				switch {
				case err != nil:
					refused.Add(1)
				case resp.StatusCode == http.StatusOK:
					served.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					other.Add(1)
				}
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				_ = c.Close()
			}
		})
	}
	wg.Wait()
	close(stopWatch)
	<-watched

	growth := peak.Load() - base
	bound := int64(connsRSSBound)
	if raceEnabled {
		bound = connsRSSBoundRace
	}
	t.Logf("served %d, refused %d, other %d; server RSS %d MB, peak %d MB (+%d MB, bound %d MB)",
		served.Load(), refused.Load(), other.Load(), base>>20, peak.Load()>>20, growth>>20, bound>>20)
	assert.Equal(t, int64(n), served.Load()+refused.Load(), "every connection served or refused")
	assert.Zero(t, other.Load(), "no other status")
	assert.Positive(t, served.Load())
	assert.Less(t, growth, bound, "the server's resident memory growth")

	// Still serving, then a clean exit.
	resp, err := http.Get("http://" + addr + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	exited = true
	assert.NoError(t, err, "the child's exit; stderr: %s", stderr.String())
	assert.NotContains(t, stderr.String(), "panic")
}
