package bootstrap

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The attacks below come from a process that can reach the transfer port
// but was never handed any handoff params. Each must leave every real
// handoff ACKed.

const (
	realHandoffs = 200
	claimedIDs   = 300
)

// realRequest is the request id the prefill side handed transfer tid to.
func realRequest(tid uint64) uint64 { return 10_000 + tid }

// strictPrefill is a server whose prefill side starts (here: completes) a
// transfer only for the request it handed the transfer to, as a prefill
// that checks its own record does; any other arrival is ignored. It
// counts the arrivals it was told of.
func strictPrefill(t *testing.T, cfg Config) (*Server, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var good, bad atomic.Int64
	var s *Server
	cfg.OnDecodeArrived = func(tid, rid uint64) {
		if rid != realRequest(tid) {
			bad.Add(1)
			return
		}
		good.Add(1)
		assert.NoError(t, s.Complete(tid))
	}
	s = startServer(t, cfg)
	return s, &good, &bad
}

// dialFrom connects to addr from the given local IP (any address in
// 127.0.0.0/8 is loopback on Linux), so a test can play a second host.
func dialFrom(t *testing.T, localIP, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}, Timeout: waitFor}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	return c
}

// runRealHandoffs awaits transfers 1..realHandoffs concurrently with the
// right request ids and tokens, and reports how many ended in ACK.
func runRealHandoffs(t *testing.T, s *Server, await func(ctx context.Context, addr string, tid, rid uint64, tok Token) (Status, error)) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*waitFor)
	defer cancel()
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	for tid := uint64(1); tid <= realHandoffs; tid++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := s.VLLMParams(tid, realRequest(tid))
			st, err := await(ctx, p.Addr(), p.TransferID, realRequest(tid), p.TransferToken)
			if err == nil && st == StatusACK {
				acked.Add(1)
			} else if failed.Add(1) <= 5 {
				t.Logf("transfer %d: %v %v", tid, st, err)
			}
		}()
	}
	wg.Wait()
	return int(acked.Load())
}

func TestServer_HijackAttemptsLeaveRealHandoffsACKed(t *testing.T) {
	t.Parallel()
	forged := Token{0xde, 0xad, 0xbe, 0xef}
	tests := []struct {
		name   string
		header func(s *Server, tid uint64) Header
	}{
		{"wrong request id, no token", func(_ *Server, tid uint64) Header {
			return NewHeader(tid, 999_000+tid, Token{})
		}},
		{"right request id, forged token", func(_ *Server, tid uint64) Header {
			return NewHeader(tid, realRequest(tid), forged)
		}},
		{"right token, wrong request id", func(s *Server, tid uint64) Header {
			return NewHeader(tid, 999_000+tid, s.Token(tid, realRequest(tid)))
		}},
		{"token of another transfer (a decode replaying its own params)", func(s *Server, tid uint64) Header {
			return NewHeader(tid, realRequest(tid), s.Token(tid+claimedIDs, realRequest(tid+claimedIDs)))
		}},
		{"keep-alive header with a forged token", func(_ *Server, tid uint64) Header {
			h := NewHeader(tid, realRequest(tid), forged)
			h.Flags = FlagKeepAlive
			return h
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, good, bad := strictPrefill(t, Config{})
			// Half the rooms are open before the attack (source-first), half
			// after it (the attacker is there first).
			for tid := uint64(1); tid <= realHandoffs/2; tid++ {
				require.NoError(t, s.Open(tid))
			}
			attackers := make([]net.Conn, 0, claimedIDs)
			for tid := uint64(1); tid <= claimedIDs; tid++ {
				c := dialFrom(t, "127.0.0.1", s.Addr())
				defer c.Close()
				_, err := c.Write(tt.header(s, tid).Append(nil))
				require.NoError(t, err)
				attackers = append(attackers, c)
			}
			for i, c := range attackers {
				require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
				b, err := io.ReadAll(c)
				require.NoError(t, err, "attacker %d", i+1)
				assert.Equal(t, []byte{byte(StatusError)}, b, "attacker %d is refused and the connection closed", i+1)
			}
			eventuallyStats(t, s, Stats{OpenRooms: realHandoffs / 2}) // no refused header created or touched a room
			for tid := uint64(realHandoffs/2 + 1); tid <= realHandoffs; tid++ {
				require.NoError(t, s.Open(tid))
			}

			assert.Equal(t, realHandoffs, runRealHandoffs(t, s, Await), "real handoffs ACKed")
			assert.Equal(t, int64(realHandoffs), good.Load(), "one arrival per real handoff")
			assert.Zero(t, bad.Load(), "no arrival reported for a refused header")
		})
	}
}

func TestServer_IdleConnectionFloodLeavesRealHandoffsACKed(t *testing.T) {
	t.Parallel()
	const flood = 1050
	tests := []struct {
		name     string
		attacker string
		cfg      Config
	}{
		{"defaults, attacker on another address", "127.0.0.2", Config{}},
		{"defaults, attacker on the decodes' address", "127.0.0.1", Config{}},
		// The limit binds the decodes' host as well: it must leave room for
		// their 200 concurrent handoffs.
		{"per-host limit", "127.0.0.2", Config{MaxConnsPerHost: 256}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each flood holds two thousand sockets.
			var logs syncBuffer
			tt.cfg.Logger = slogTo(&logs)
			s, good, _ := strictPrefill(t, tt.cfg)
			for tid := uint64(1); tid <= realHandoffs; tid++ {
				require.NoError(t, s.Open(tid))
			}
			for range flood {
				c := dialFrom(t, tt.attacker, s.Addr())
				defer c.Close()
			}
			require.Eventually(t, func() bool { return s.Stats().Conns <= DefaultMaxConns }, waitFor, time.Millisecond)

			var cl Client
			defer cl.Close()
			await := Await
			if tt.attacker == "127.0.0.1" {
				await = cl.Await // connection reuse holds up too
			}
			if !assert.Equal(t, realHandoffs, runRealHandoffs(t, s, await), "real handoffs ACKed") {
				t.Log(logs.String())
			}
			assert.Equal(t, int64(realHandoffs), good.Load())
			assert.Contains(t, logs.String(), "connection limit reached")
		})
	}
}

func TestServer_PerHostLimitRefusesOnlyThatHost(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := startServer(t, Config{MaxConnsPerHost: 2, Logger: slogTo(&logs)})
	var waiting []<-chan awaitResult
	for i := range 2 {
		tid := uint64(i + 1)
		require.NoError(t, s.Open(tid))
		ch := make(chan awaitResult, 1)
		c := dialFrom(t, "127.0.0.2", s.Addr())
		defer c.Close()
		_, err := c.Write(NewHeader(tid, 1, s.Token(tid, 1)).Append(nil))
		require.NoError(t, err)
		go func() {
			var one [1]byte
			_, err := io.ReadFull(c, one[:])
			ch <- awaitResult{Status(one[0]), err}
		}()
		waiting = append(waiting, ch)
	}
	require.Eventually(t, func() bool { return s.Stats().Waiting == 2 }, waitFor, time.Millisecond)

	c := dialFrom(t, "127.0.0.2", s.Addr())
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, []byte{byte(StatusError)}, b, "a third connection from the full host is refused")
	assert.Contains(t, logs.String(), "limit=MaxConnsPerHost")

	require.NoError(t, s.Open(3))
	require.NoError(t, s.Abort(3))
	_, err = awaitOn(t.Context(), s, 3, 1)
	require.ErrorIs(t, err, ErrAborted, "another host still gets through")
	for tid := uint64(1); tid <= 2; tid++ {
		require.NoError(t, s.Complete(tid))
	}
	for _, ch := range waiting {
		r := receive(t, ch, "ACK for a waiting decode")
		require.NoError(t, r.err)
		assert.Equal(t, StatusACK, r.status, "authenticated decodes are never evicted")
	}
}

func TestServer_EvictedIdleKeepAliveIsClosedSilently(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{MaxConns: 1})
	require.NoError(t, s.Open(1))
	require.NoError(t, s.Abort(1))
	c, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer c.Close()
	h := NewHeader(1, 1, s.Token(1, 1))
	h.Flags = FlagKeepAlive
	_, err = c.Write(h.Append(nil))
	require.NoError(t, err)
	var one [1]byte
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	_, err = io.ReadFull(c, one[:])
	require.NoError(t, err)
	require.Equal(t, StatusAbort, Status(one[0]))

	// The kept connection idles; a new one evicts it. It gets no byte: its
	// client sent nothing, and would read a byte as its next answer.
	other, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer other.Close()
	rest, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Empty(t, rest)
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
