package bootstrap

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// connProgram reads a fuzz input as a script of operations on a live
// server and up to fuzzConns client connections. Each step is an opcode
// byte (low 3 bits: the operation, high bits: which connection) and the
// operation's arguments.
type connProgram struct {
	data []byte
}

func (p *connProgram) next() (byte, bool) {
	if len(p.data) == 0 {
		return 0, false
	}
	b := p.data[0]
	p.data = p.data[1:]
	return b, true
}

func (p *connProgram) take(n int) []byte {
	n = min(n, len(p.data))
	b := p.data[:n]
	p.data = p.data[n:]
	return b
}

const fuzzConns = 4

// fuzzClient is one client connection of the program and what it saw.
type fuzzClient struct {
	id        int
	conn      net.Conn
	keepAlive int    // authentic keep-alive headers written
	got       []byte // status bytes received
}

// FuzzServerConnections drives a live server on loopback with random
// byte streams, authentic headers, hang-ups, half-closes and room
// outcomes, interleaved across several connections, under tight limits
// and timeouts so eviction and every timeout path run. It checks that the
// server only ever answers ACK, ABORT or ERROR, never answers a
// connection more often than it asked (once, plus once per authentic
// keep-alive header), writes nothing after ERROR, lets every connection
// go, and closes without leaking goroutines (goleak in TestMain).
func FuzzServerConnections(f *testing.F) {
	seeds, err := os.ReadDir("testdata/fuzz/FuzzServerConnections")
	if err != nil || len(seeds) == 0 {
		// The committed corpus seeds the fuzzer; these keep it useful
		// without one.
		f.Add([]byte{1, 1, 2, 3, 1})
		f.Add([]byte{0, 40, 'M', 'K', 'V', 'T', 2, 0})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return // long scripts add time, not paths
		}
		var s *Server
		s, err := Listen(Config{
			MaxConns: fuzzConns, MaxConnsPerHost: fuzzConns - 1,
			HeaderTimeout: 20 * time.Millisecond, PendingWait: 20 * time.Millisecond,
			IdleTimeout: 30 * time.Millisecond, AbortedTTL: time.Second, CompletedTTL: time.Second,
			OnDecodeArrived: func(tid, rid uint64) {
				if rid%2 == 0 {
					_ = s.Complete(tid)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
		for tid := uint64(1); tid <= 3; tid++ {
			if err := s.Open(tid); err != nil {
				t.Fatal(err)
			}
		}
		var clients [fuzzConns]fuzzClient
		for i := range clients {
			clients[i].id = i
		}
		conn := func(i int) *fuzzClient {
			c := &clients[i]
			if c.conn == nil {
				nc, err := net.Dial("tcp", s.Addr())
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				c.conn = nc
			}
			return c
		}
		drain := func(c *fuzzClient, wait time.Duration) {
			if c.conn == nil {
				return
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(wait))
			b, _ := io.ReadAll(c.conn)
			c.got = append(c.got, b...)
		}
		hangUp := func(c *fuzzClient) {
			if c.conn != nil {
				_ = c.conn.Close()
				checkAnswers(t, c)
			}
			*c = fuzzClient{id: c.id}
		}

		prog := &connProgram{data: data}
		for {
			op, ok := prog.next()
			if !ok {
				break
			}
			arg, _ := prog.next()
			c := conn(int(op>>3) % fuzzConns)
			room := uint64(arg%6) + 1 // rooms 1-3 open, 4-6 not yet
			switch op & 7 {
			case 0: // raw bytes
				_, _ = c.conn.Write(prog.take(int(arg % 64)))
			case 1: // an authentic header, keep-alive when arg is odd
				h := NewHeader(room, uint64(arg), s.Token(room, uint64(arg)))
				if arg%2 == 1 {
					h.Flags = FlagKeepAlive
				}
				if _, err := c.conn.Write(h.Append(nil)); err == nil && h.Flags != 0 {
					c.keepAlive++
				}
			case 2:
				drain(c, time.Millisecond)
				hangUp(c)
			case 3:
				_ = s.Complete(room)
			case 4:
				_ = s.Abort(room)
			case 5:
				_ = s.Open(room)
			case 6:
				if tc, ok := c.conn.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			case 7:
				drain(c, time.Duration(arg%8)*time.Millisecond)
			}
		}

		for tid := uint64(1); tid <= 6; tid++ {
			_ = s.Abort(tid) // no waiter is left without an outcome
		}
		for i := range clients {
			c := &clients[i]
			// Every server path ends the connection on its own: the
			// status, a header or idle timeout, or PendingWait.
			drain(c, 5*time.Second)
			if c.conn != nil {
				var one [1]byte
				if _, err := c.conn.Read(one[:]); !errors.Is(err, io.EOF) && !isReset(err) {
					t.Errorf("conn %d: still open after every outcome and timeout: %v", i, err)
				}
			}
			hangUp(c)
		}
		deadline := time.Now().Add(5 * time.Second)
		for s.Stats().Conns != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("server still serves %d connections after every client left", s.Stats().Conns)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// isReset reports a connection the server reset (it closed with our bytes
// unread), which is as final as EOF.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func checkAnswers(t *testing.T, c *fuzzClient) {
	t.Helper()
	i := c.id
	if len(c.got) > 1+c.keepAlive {
		t.Errorf("conn %d: %d status bytes (%x) for at most %d headers owed one", i, len(c.got), c.got, 1+c.keepAlive)
	}
	for j, b := range c.got {
		switch Status(b) {
		case StatusACK, StatusAbort:
		case StatusError:
			if j != len(c.got)-1 {
				t.Errorf("conn %d: bytes after ERROR: %x", i, c.got)
			}
		default:
			t.Errorf("conn %d: unknown status byte 0x%02x in %x", i, b, c.got)
		}
	}
}
