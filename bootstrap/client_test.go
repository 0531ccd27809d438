package bootstrap

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingListener counts the connections a server accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// countingServer starts a server whose prefill side completes every
// transfer as soon as its decode arrives, and counts accepted connections.
func countingServer(t *testing.T, cfg Config) (*Server, *countingListener) {
	t.Helper()
	var s *Server
	cfg.OnDecodeArrived = func(tid, _ uint64) { assert.NoError(t, s.Complete(tid)) }
	s, err := New(cfg)
	require.NoError(t, err)
	cl := &countingListener{}
	s.listen = func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		cl.Listener = ln
		return cl, err
	}
	require.NoError(t, s.Start())
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, cl
}

func clientAwait(t *testing.T, c *Client, s *Server, tid, rid uint64) (Status, error) {
	t.Helper()
	p := s.VLLMParams(tid, rid)
	return c.Await(t.Context(), p.Addr(), p.TransferID, rid, p.TransferToken)
}

func TestClient_SequentialHandoffsShareOneConnection(t *testing.T) {
	t.Parallel()
	s, ln := countingServer(t, Config{})
	var c Client
	defer c.Close()
	for tid := uint64(1); tid <= 50; tid++ {
		require.NoError(t, s.Open(tid))
		st, err := clientAwait(t, &c, s, tid, tid)
		require.NoError(t, err)
		require.Equal(t, StatusACK, st)
	}
	assert.Equal(t, int64(1), ln.accepted.Load(), "fifty handoffs, one dial")
}

func TestClient_ConcurrentHandoffsReuseUpToMaxIdle(t *testing.T) {
	t.Parallel()
	s, ln := countingServer(t, Config{})
	c := Client{MaxIdlePerAddr: 4}
	defer c.Close()
	const rounds, width = 10, 4
	tid := uint64(0)
	for range rounds {
		var wg sync.WaitGroup
		for range width {
			tid++
			require.NoError(t, s.Open(tid))
			wg.Add(1)
			go func(tid uint64) {
				defer wg.Done()
				st, err := clientAwait(t, &c, s, tid, 7)
				assert.NoError(t, err)
				assert.Equal(t, StatusACK, st)
			}(tid)
		}
		wg.Wait()
	}
	assert.LessOrEqual(t, ln.accepted.Load(), int64(width), "each round reuses the connections the previous one kept")
}

func TestClient_OutcomesThatKeepTheConnection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		prepare   func(s *Server, tid uint64)
		wantErr   error
		wantDials int64
	}{
		{"ACK keeps it", func(s *Server, tid uint64) { require.NoError(t, s.Open(tid)) }, nil, 1},
		{"ABORT keeps it", func(s *Server, tid uint64) { require.NoError(t, s.Abort(tid)) }, ErrAborted, 1},
		{"ERROR drops it", func(*Server, uint64) {}, ErrProtocol, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, ln := countingServer(t, Config{PendingWait: time.Millisecond})
			var c Client
			defer c.Close()
			for tid := uint64(1); tid <= 2; tid++ {
				tt.prepare(s, tid)
				_, err := clientAwait(t, &c, s, tid, 1)
				if tt.wantErr == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tt.wantErr)
				}
			}
			assert.Equal(t, tt.wantDials, ln.accepted.Load())
		})
	}
}

func TestClient_RedialsWhenServerClosedAnIdleConnection(t *testing.T) {
	t.Parallel()
	s, ln := countingServer(t, Config{IdleTimeout: time.Millisecond})
	var c Client
	defer c.Close()
	require.NoError(t, s.Open(1))
	st, err := clientAwait(t, &c, s, 1, 1)
	require.NoError(t, err)
	require.Equal(t, StatusACK, st)
	eventuallyStats(t, s, Stats{Tombstones: 1}) // the server dropped the idle connection

	require.NoError(t, s.Open(2))
	st, err = clientAwait(t, &c, s, 2, 1)
	require.NoError(t, err, "a dead kept connection is replaced, not reported")
	assert.Equal(t, StatusACK, st)
	assert.Equal(t, int64(2), ln.accepted.Load())
}

func TestClient_WrongTokenIsRefused(t *testing.T) {
	t.Parallel()
	s, _ := countingServer(t, Config{})
	var c Client
	defer c.Close()
	require.NoError(t, s.Open(1))
	st, err := c.Await(t.Context(), s.AdvertisedAddr(), 1, 1, s.Token(1, 2))
	require.ErrorIs(t, err, ErrProtocol)
	assert.Equal(t, StatusError, st)
	_, err = c.Await(t.Context(), s.AdvertisedAddr(), 0, 1, s.Token(1, 2))
	require.ErrorIs(t, err, ErrZeroTransfer)
}

func TestServer_CloseEndsKeptConnectionsSilently(t *testing.T) {
	t.Parallel()
	s, err := Listen(Config{})
	require.NoError(t, err)
	require.NoError(t, s.Open(1))
	require.NoError(t, s.Abort(1))
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	h := NewHeader(1, 1, s.Token(1, 1))
	h.Flags = FlagKeepAlive
	_, err = conn.Write(h.Append(nil))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(waitFor)))
	var buf [2]byte
	n, err := conn.Read(buf[:])
	require.NoError(t, err)
	require.Equal(t, []byte{byte(StatusAbort)}, buf[:n])
	require.Eventually(t, func() bool { return s.Stats().Waiting == 0 }, waitFor, time.Millisecond)

	require.NoError(t, s.Close())
	n, err = conn.Read(buf[:])
	assert.Zero(t, n, "no byte on an idle kept connection")
	assert.Error(t, err)
}
