package k6http

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawServer answers each request it reads with what reply writes (the
// request's index on its connection and overall given); reply returns
// false to close the connection after its reply.
type rawServer struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startRawServer(t *testing.T, reply func(c *net.TCPConn, req *http.Request, n int) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{ln: ln}
	var served atomic.Int64
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() { _ = conn.Close() }()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if !reply(conn.(*net.TCPConn), req, int(served.Add(1))-1) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() + "/x" }

// outcome is what a script sees of an exchange, addresses masked.
type outcome struct {
	Status           int
	Proto, Body, Err string
	Code             int
	Hops             int
}

var addrs = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// runBoth sends the requests one after another (pause apart) through a
// VU client on its own connections and through one on net/http's
// Transport, each against a fresh server, and returns the outcomes and
// how many connections each server saw.
func runBoth(t *testing.T, reply func(c *net.TCPConn, req *http.Request, n int) bool, reqs []*spec, pause time.Duration) (viaDirect, viaTransport []outcome, connsDirect, connsTransport int64) {
	t.Helper()
	run := func(useDirect bool) ([]outcome, int64) {
		srv := startRawServer(t, reply)
		opts := &Options{}
		dial := dialer(opts)
		c := &Client{conns: &conns{dial: dial}, direct: useDirect}
		tr := newTransport(opts, dial)
		defer tr.CloseIdleConnections()
		defer c.conns.closeIdle()
		var out []outcome
		for i, s0 := range reqs {
			if i > 0 {
				time.Sleep(pause)
			}
			s := *s0
			s.url = srv.url()
			hops := c.do(context.Background(), tr, nil, &s)
			last := hops[len(hops)-1]
			out = append(out, outcome{Status: last.status, Proto: last.proto, Body: string(last.body),
				Err: addrs.ReplaceAllString(last.errMsg, "ADDR"), Code: last.errCode, Hops: len(hops)})
			if useDirect && last.err == nil {
				assert.Positive(t, last.recv, "bytes received are counted")
				assert.Positive(t, last.sent, "bytes sent are counted")
			}
		}
		c.conns.closeIdle()
		tr.CloseIdleConnections()
		return out, srv.conns.Load()
	}
	viaDirect, connsDirect = run(true)
	viaTransport, connsTransport = run(false)
	return viaDirect, viaTransport, connsDirect, connsTransport
}

func get() *spec {
	return &spec{method: http.MethodGet, header: http.Header{}, timeout: 5 * time.Second, responseType: "text", redirects: 10}
}

func post() *spec {
	s := get()
	s.method, s.body = http.MethodPost, []byte("payload")
	return s
}

func write(c net.Conn, format string, args ...any) { _, _ = fmt.Fprintf(c, format, args...) }

// TestDirect_ActsAsTheTransport: the VU's own plain-HTTP path gives a
// script what net/http's Transport gives it, response or failure, and
// keeps or drops connections as the Transport does.
func TestDirect_ActsAsTheTransport(t *testing.T) {
	t.Parallel()
	ok := func(c *net.TCPConn, _ *http.Request, n int) bool {
		write(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi %02d", n)
		return true
	}
	timeout := get()
	timeout.timeout = 100 * time.Millisecond
	head := get()
	head.method = http.MethodHead
	closing := get()
	closing.header.Set("Connection", "close")
	tests := []struct {
		name  string
		reply func(c *net.TCPConn, req *http.Request, n int) bool
		reqs  []*spec
		pause time.Duration
	}{
		{"keep-alive", ok, []*spec{get(), get(), post()}, 0},
		{"chunked", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
			return true
		}, []*spec{get(), get()}, 0},
		{"server closes", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
			return false
		}, []*spec{get(), post()}, 0},
		{"client asks to close", ok, []*spec{closing, closing}, 0},
		{"HTTP/1.0 to the end", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.0 200 OK\r\n\r\nuntil close")
			return false
		}, []*spec{get(), get()}, 0},
		{"1xx skipped", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nz")
			return true
		}, []*spec{post(), get()}, 0},
		{"too many 1xx", func(c *net.TCPConn, _ *http.Request, n int) bool {
			for range 6 {
				write(c, "HTTP/1.1 103 Early Hints\r\n\r\n")
			}
			write(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			return false
		}, []*spec{get()}, 0},
		{"no response", func(*net.TCPConn, *http.Request, int) bool { return false }, []*spec{get(), post()}, 0},
		{"reset", func(c *net.TCPConn, _ *http.Request, n int) bool {
			_ = c.SetLinger(0)
			return false
		}, []*spec{get()}, 0},
		{"garbage", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "NOT HTTP\r\n\r\n")
			return false
		}, []*spec{get()}, 0},
		{"short body", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
			return false
		}, []*spec{get(), get()}, 0},
		{"timeout", func(c *net.TCPConn, _ *http.Request, n int) bool {
			time.Sleep(300 * time.Millisecond)
			return false
		}, []*spec{timeout}, 0},
		{"head and 204", func(c *net.TCPConn, req *http.Request, n int) bool {
			if req.Method == http.MethodHead {
				write(c, "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
			} else {
				write(c, "HTTP/1.1 204 No Content\r\n\r\n")
			}
			return true
		}, []*spec{head, get(), head}, 0},
		{"closed while idle", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi %02d", n)
			return false // no Connection: close: the client learns it later
		}, []*spec{get(), get(), post(), post(), get()}, 50 * time.Millisecond},
		{"head too long", func(c *net.TCPConn, _ *http.Request, n int) bool {
			write(c, "HTTP/1.1 200 OK\r\n")
			line := "X-Filler: " + strings.Repeat("f", 1<<16) + "\r\n"
			for range (maxHeaderBytes / len(line)) + 2 {
				if _, err := io.WriteString(c, line); err != nil {
					return false
				}
			}
			return false
		}, []*spec{get()}, 0},
		{"redirect", func(c *net.TCPConn, req *http.Request, n int) bool {
			if req.URL.Path == "/x" {
				write(c, "HTTP/1.1 302 Found\r\nLocation: /y\r\nContent-Length: 0\r\n\r\n")
			} else {
				write(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny")
			}
			return true
		}, []*spec{get(), post()}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, tr, cd, ct := runBoth(t, tc.reply, tc.reqs, tc.pause)
			assert.Equal(t, tr, d, "outcomes")
			assert.Equal(t, ct, cd, "connections the server saw")
		})
	}
}
