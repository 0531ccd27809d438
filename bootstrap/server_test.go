package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitFor bounds how long a test waits for the server to reach a state; it
// is a failure guard, never an asserted duration.
const waitFor = 5 * time.Second

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// eventuallyStats waits until the server's occupancy matches want: a
// connection leaves the count just after its status byte is written.
func eventuallyStats(t *testing.T, s *Server, want Stats) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return s.Stats() == want }, waitFor, time.Millisecond) {
		assert.Equal(t, want, s.Stats())
	}
}

type awaitResult struct {
	status Status
	err    error
}

func awaitAsync(ctx context.Context, s *Server, transferID, requestID uint64) <-chan awaitResult {
	ch := make(chan awaitResult, 1)
	go func() {
		st, err := awaitOn(ctx, s, transferID, requestID)
		ch <- awaitResult{st, err}
	}()
	return ch
}

// expectACK waits for each await to finish with ACK and no error.
func expectACK(t *testing.T, chs ...<-chan awaitResult) {
	t.Helper()
	for _, ch := range chs {
		r := receive(t, ch, "ACK")
		require.NoError(t, r.err)
		assert.Equal(t, StatusACK, r.status)
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

type arrival struct{ transferID, requestID uint64 }

func arrivals() (chan arrival, func(uint64, uint64)) {
	ch := make(chan arrival, 16)
	return ch, func(tid, rid uint64) { ch <- arrival{tid, rid} }
}

// rawExchange writes b on a fresh connection and returns the single byte
// the server answers.
func rawExchange(t *testing.T, addr string, b []byte) Status {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitFor)))
	if len(b) > 0 {
		_, err = c.Write(b)
		require.NoError(t, err)
	}
	var one [1]byte
	_, err = io.ReadFull(c, one[:])
	require.NoError(t, err)
	return Status(one[0])
}

func TestServer_ACKPrefillFirst(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()
	require.NoError(t, s.Open(id))

	res := awaitAsync(t.Context(), s, id, 77)
	a := receive(t, arrived, "decode arrival")
	assert.Equal(t, arrival{id, 77}, a)
	select {
	case r := <-res:
		t.Fatalf("decode answered %v before Complete", r.status)
	default:
	}
	require.NoError(t, s.Complete(id))
	expectACK(t, res)
}

func TestServer_ACKDecodeFirst(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()

	res := awaitAsync(t.Context(), s, id, 5)
	require.Eventually(t, func() bool { return s.Stats().PendingRooms == 1 }, waitFor, time.Millisecond)
	select {
	case a := <-arrived:
		t.Fatalf("arrival %+v reported before the room was opened", a)
	default:
	}
	require.NoError(t, s.Open(id))
	assert.Equal(t, arrival{id, 5}, receive(t, arrived, "decode arrival after Open"))
	require.NoError(t, s.Complete(id))
	expectACK(t, res)
	eventuallyStats(t, s, Stats{Tombstones: 1})
}

func TestServer_ArrivalCallbackMayCompleteDirectly(t *testing.T) {
	t.Parallel()
	var s *Server
	s = startServer(t, Config{OnDecodeArrived: func(tid, _ uint64) { assert.NoError(t, s.Complete(tid)) }})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	st, err := awaitOn(t.Context(), s, id, 1)
	require.NoError(t, err)
	assert.Equal(t, StatusACK, st)
}

func TestServer_AbortAnswersWaitingDecode(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	res := awaitAsync(t.Context(), s, id, 9)
	receive(t, arrived, "decode arrival")
	require.NoError(t, s.Abort(id))

	r := receive(t, res, "ABORT")
	assert.Equal(t, StatusAbort, r.status)
	require.ErrorIs(t, r.err, ErrAborted)
	assert.NotErrorIs(t, r.err, ErrProtocol)
	assert.EqualError(t, r.err, "transfer "+strconv.FormatUint(id, 10)+" aborted by source")
}

func TestServer_AbortBeforeOpenAnswersWaitingDecode(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	id := NextTransferID()
	res := awaitAsync(t.Context(), s, id, 1)
	require.Eventually(t, func() bool { return s.Stats().PendingRooms == 1 }, waitFor, time.Millisecond)
	require.NoError(t, s.Abort(id))
	r := receive(t, res, "ABORT")
	require.ErrorIs(t, r.err, ErrAborted)
	eventuallyStats(t, s, Stats{Tombstones: 1})
}

func TestServer_LateDecodeAfterAbort(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const ttl = 30 * time.Second
	s := startServer(t, Config{Now: clock.Now, AbortedTTL: ttl, PendingWait: 20 * time.Millisecond})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	require.NoError(t, s.Abort(id))

	clock.Advance(ttl - time.Second)
	st, err := awaitOn(t.Context(), s, id, 1)
	require.ErrorIs(t, err, ErrAborted, "a decode within the TTL must learn of the abort")
	assert.Equal(t, StatusAbort, st)

	clock.Advance(2 * time.Second)
	st, err = awaitOn(t.Context(), s, id, 1)
	require.ErrorIs(t, err, ErrProtocol, "after the TTL the room is gone")
	assert.NotErrorIs(t, err, ErrAborted)
	assert.Equal(t, StatusError, st)
	eventuallyStats(t, s, Stats{})
}

func TestServer_LateDecodeAfterComplete(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const ttl = 5 * time.Second
	s := startServer(t, Config{Now: clock.Now, CompletedTTL: ttl, PendingWait: 20 * time.Millisecond})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	require.NoError(t, s.Complete(id))

	st, err := awaitOn(t.Context(), s, id, 1)
	require.NoError(t, err)
	assert.Equal(t, StatusACK, st)

	clock.Advance(ttl)
	// Sweep first through an unrelated call, so this decode sees an id the
	// server has forgotten: it must wait out PendingWait and get ERROR.
	other := NextTransferID()
	require.NoError(t, s.Open(other))
	st, err = awaitOn(t.Context(), s, id, 1)
	require.ErrorIs(t, err, ErrProtocol)
	assert.Equal(t, StatusError, st)
	eventuallyStats(t, s, Stats{OpenRooms: 1})
}

func TestServer_BadHeaderGetsError(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	good := NewHeader(id, 1, s.Token(id, 1))
	withVersion := func(v uint16) []byte { h := good; h.Version = v; return h.Append(nil) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"bad magic", withByte(good.Append(nil), 1, 'X')},
		{"http probe", []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n")},
		{"version 1", withVersion(1)},
		{"version 0", withVersion(0)},
		{"flags set", Header{Version: 2, Flags: 4, TransferID: id, RequestID: 1, Token: good.Token}.Append(nil)},
		{"zero transfer id", NewHeader(0, 1, good.Token).Append(nil)},
		{"zero token", NewHeader(id, 1, Token{}).Append(nil)},
		{"token of another request", NewHeader(id, 2, good.Token).Append(nil)},
		{"token of another transfer", NewHeader(id+1, 1, good.Token).Append(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, StatusError, rawExchange(t, s.Addr(), tt.in))
		})
	}
}

func TestServer_ExtraBytesAfterHeaderGetError(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	in := append(NewHeader(id, 1, s.Token(id, 1)).Append(nil), 0xff)
	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), in))
	eventuallyStats(t, s, Stats{OpenRooms: 1})
}

func TestServer_HeaderTimeoutGetsError(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{HeaderTimeout: 30 * time.Millisecond})
	partial := NewHeader(NextTransferID(), 1, Token{}).Append(nil)[:10]
	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), partial))
	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), nil), "a silent client times out too")
}

func TestServer_ConnectionLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{MaxConns: 1})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	res := awaitAsync(t.Context(), s, id, 1)
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, waitFor, time.Millisecond)

	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), nil), "an excess connection is refused at once")
	assert.Equal(t, 1, s.Stats().Conns)

	require.NoError(t, s.Complete(id))
	r := receive(t, res, "ACK for the admitted decode")
	require.NoError(t, r.err)
	require.Eventually(t, func() bool { return s.Stats().Conns == 0 }, waitFor, time.Millisecond)

	id2 := NextTransferID()
	require.NoError(t, s.Open(id2))
	require.NoError(t, s.Abort(id2))
	_, err := awaitOn(t.Context(), s, id2, 1)
	require.ErrorIs(t, err, ErrAborted, "a slot freed by a finished decode is usable again")
}

func TestServer_RoomLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{MaxRooms: 2})
	a, b, c := NextTransferID(), NextTransferID(), NextTransferID()
	require.NoError(t, s.Open(a))
	require.NoError(t, s.Open(b))
	err := s.Open(c)
	require.ErrorIs(t, err, ErrRoomsFull)
	assert.Contains(t, err.Error(), "MaxRooms=2")
	require.NoError(t, s.Complete(a))
	require.NoError(t, s.Open(c), "resolved rooms do not count against MaxRooms")
	eventuallyStats(t, s, Stats{OpenRooms: 2, Tombstones: 1})
}

func TestServer_TombstoneLimitForgetsCompletedFirst(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{MaxTombstones: 2, PendingWait: 20 * time.Millisecond})
	aborted, done1, done2 := NextTransferID(), NextTransferID(), NextTransferID()
	require.NoError(t, s.Abort(aborted))
	for _, id := range []uint64{done1, done2} {
		require.NoError(t, s.Open(id))
		require.NoError(t, s.Complete(id))
	}
	assert.Equal(t, 2, s.Stats().Tombstones)
	_, err := awaitOn(t.Context(), s, aborted, 1)
	require.ErrorIs(t, err, ErrAborted, "the abort outlives older completed rooms")
	_, err = awaitOn(t.Context(), s, done2, 1)
	require.NoError(t, err)
	_, err = awaitOn(t.Context(), s, done1, 1)
	require.ErrorIs(t, err, ErrProtocol, "the oldest completed room was forgotten")
}

func TestServer_PendingWaitTimeout(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{PendingWait: 30 * time.Millisecond, OnDecodeArrived: onArrive})
	st, err := awaitOn(t.Context(), s, NextTransferID(), 1)
	require.ErrorIs(t, err, ErrProtocol)
	assert.Equal(t, StatusError, st)
	assert.Equal(t, 0, s.Stats().PendingRooms, "the pending room goes with its last decode")
	assert.Empty(t, arrived)
}

func TestServer_DecodeHangUpFreesPendingRoom(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	res := awaitAsync(ctx, s, NextTransferID(), 1)
	require.Eventually(t, func() bool { return s.Stats().PendingRooms == 1 }, waitFor, time.Millisecond)
	cancel()
	r := receive(t, res, "cancelled await")
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Equal(t, Status(0), r.status)
	require.Eventually(t, func() bool { return s.Stats() == Stats{} }, waitFor, time.Millisecond)
}

func TestAwait_ContextCancelWhileRoomOpen(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	ctx, cancel := context.WithCancel(t.Context())
	res := awaitAsync(ctx, s, id, 1)
	receive(t, arrived, "decode arrival")
	cancel()
	r := receive(t, res, "cancelled await")
	require.ErrorIs(t, r.err, context.Canceled)
	require.Eventually(t, func() bool { return s.Stats().Conns == 0 }, waitFor, time.Millisecond)
	assert.Equal(t, 1, s.Stats().OpenRooms, "the source still holds; its own timeout ends the hold")
	require.NoError(t, s.Abort(id))
}

func TestAwait_ContextDeadline(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := awaitOn(ctx, s, NextTransferID(), 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestAwait_DialFailureNamesAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = Await(t.Context(), addr, 3, 1, Token{1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), addr)
	assert.NotErrorIs(t, err, ErrProtocol)
	_, err = Await(t.Context(), addr, 0, 1, Token{1})
	require.ErrorIs(t, err, ErrZeroTransfer)
}

func TestServer_CloseAnswersWaitingDecodes(t *testing.T) {
	t.Parallel()
	s, err := Listen(Config{})
	require.NoError(t, err)
	open := NextTransferID()
	require.NoError(t, s.Open(open))
	var results []<-chan awaitResult
	for i := range 3 {
		results = append(results, awaitAsync(t.Context(), s, open, uint64(i)))
	}
	results = append(results, awaitAsync(t.Context(), s, NextTransferID(), 9))
	silent, err := net.Dial("tcp", s.Addr()) // still inside its header deadline
	require.NoError(t, err)
	defer silent.Close()
	require.Eventually(t, func() bool { return s.Stats().Conns == 5 }, waitFor, time.Millisecond)

	require.NoError(t, s.Close())
	for i, ch := range results {
		r := receive(t, ch, "answer on Close")
		require.ErrorIs(t, r.err, ErrProtocol, "decode %d", i)
		assert.Equal(t, StatusError, r.status)
	}
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(waitFor)))
	var one [1]byte
	_, err = io.ReadFull(silent, one[:])
	require.NoError(t, err)
	assert.Equal(t, StatusError, Status(one[0]), "a connection still sending its header is answered too")
	require.NoError(t, s.Close(), "Close is idempotent")
	require.ErrorIs(t, s.Open(NextTransferID()), ErrClosed)
	require.ErrorIs(t, s.Complete(open), ErrClosed)
	require.ErrorIs(t, s.Abort(open), ErrClosed)
	_, err = Await(t.Context(), s.Addr(), open, 1, s.Token(open, 1))
	require.Error(t, err, "nothing listens after Close")
}

func TestServer_RoomLifecycleErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	opened, aborted, completed := NextTransferID(), NextTransferID(), NextTransferID()
	require.NoError(t, s.Open(opened))
	require.NoError(t, s.Open(aborted))
	require.NoError(t, s.Abort(aborted))
	require.NoError(t, s.Open(completed))
	require.NoError(t, s.Complete(completed))

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"open zero", func() error { return s.Open(0) }, ErrZeroTransfer},
		{"complete zero", func() error { return s.Complete(0) }, ErrZeroTransfer},
		{"abort zero", func() error { return s.Abort(0) }, ErrZeroTransfer},
		{"open twice", func() error { return s.Open(opened) }, ErrRoomExists},
		{"reopen aborted", func() error { return s.Open(aborted) }, ErrRoomExists},
		{"reopen completed", func() error { return s.Open(completed) }, ErrRoomExists},
		{"complete never opened", func() error { return s.Complete(NextTransferID()) }, ErrUnknownTransfer},
		{"complete aborted", func() error { return s.Complete(aborted) }, ErrAlreadyResolved},
		{"abort completed", func() error { return s.Abort(completed) }, ErrAlreadyResolved},
		{"abort aborted is a no-op", func() error { return s.Abort(aborted) }, nil},
		{"complete completed is a no-op", func() error { return s.Complete(completed) }, nil},
	}
	for _, tt := range tests {
		err := tt.call()
		if tt.want == nil {
			assert.NoError(t, err, tt.name)
			continue
		}
		assert.ErrorIs(t, err, tt.want, tt.name)
	}
	eventuallyStats(t, s, Stats{OpenRooms: 1, Tombstones: 2})
}

func TestServer_CompleteWithWaitingDecodeButNoOpenIsError(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	id := NextTransferID()
	res := awaitAsync(t.Context(), s, id, 1)
	require.Eventually(t, func() bool { return s.Stats().PendingRooms == 1 }, waitFor, time.Millisecond)
	require.ErrorIs(t, s.Complete(id), ErrUnknownTransfer)
	require.NoError(t, s.Abort(id))
	require.ErrorIs(t, receive(t, res, "ABORT").err, ErrAborted)
}

// settled waits until transferID's room has n decodes parked and none of
// them has an arrival still to report, so any OnDecodeArrived due has run
// or is running.
func settled(t *testing.T, s *Server, transferID uint64, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.rooms[transferID]
		if r == nil || len(r.waiters) != n {
			return false
		}
		for _, w := range r.waiters {
			if w.notify {
				return false
			}
		}
		return true
	}, waitFor, time.Millisecond)
}

// TestServer_MultipleDecodesShareOutcome: decodes waiting in one room all
// get its outcome, and the prefill side hears of an arrival once per room,
// whichever order the decodes and Open came in.
func TestServer_MultipleDecodesShareOutcome(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()
	first := awaitAsync(t.Context(), s, id, 1)
	second := awaitAsync(t.Context(), s, id, 2)
	require.Eventually(t, func() bool { return s.Stats().Conns == 2 && s.Stats().PendingRooms == 1 }, waitFor, time.Millisecond)
	settled(t, s, id, 2)
	require.NoError(t, s.Open(id))
	a := receive(t, arrived, "arrival")
	assert.Equal(t, id, a.transferID)
	settled(t, s, id, 2)
	require.NoError(t, s.Complete(id))
	expectACK(t, first, second)
	assert.Zero(t, len(arrived), "one arrival per room")
}

// TestServer_ReconnectingDecodeDoesNotArriveTwice: a decode that connects
// again for a transfer already announced (a retry, a duplicate) waits for
// the outcome without a second OnDecodeArrived, which would start a second
// transfer on the prefill side.
func TestServer_ReconnectingDecodeDoesNotArriveTwice(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	id := NextTransferID()
	require.NoError(t, s.Open(id))

	ctx, cancel := context.WithCancel(t.Context())
	gone := awaitAsync(ctx, s, id, 7)
	assert.Equal(t, arrival{id, 7}, receive(t, arrived, "first arrival"))
	cancel() // the first connection drops
	require.ErrorIs(t, receive(t, gone, "cancelled await").err, context.Canceled)
	require.Eventually(t, func() bool { return s.Stats().Conns == 0 }, waitFor, time.Millisecond)

	retry := awaitAsync(t.Context(), s, id, 7)
	dup := awaitAsync(t.Context(), s, id, 7)
	settled(t, s, id, 2)
	require.NoError(t, s.Complete(id))
	expectACK(t, retry, dup)
	assert.Zero(t, len(arrived), "later connections only wait for the outcome")
}

func TestServer_NotStarted(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	require.NoError(t, err)
	require.ErrorIs(t, s.Open(1), ErrNotStarted)
	assert.Empty(t, s.Addr())
	assert.Zero(t, s.Port())
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Start(), ErrClosed)
}

func TestServer_AdvertisedHost(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	host, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.Equal(t, "127.0.0.1", s.AdvertisedHost(), "defaults to the bound host")
	assert.Equal(t, port, strconv.Itoa(s.Port()))
	assert.Equal(t, VLLMParams{TransferID: 7, PrefillHost: "127.0.0.1", PrefillPort: s.Port(), TransferToken: s.Token(7, 3)}, s.VLLMParams(7, 3))

	wide := startServer(t, Config{Addr: "0.0.0.0:0", AdvertisedHost: "prefill-0.mocker.internal"})
	assert.Equal(t, "prefill-0.mocker.internal", wide.AdvertisedHost())
	p := wide.VLLMParams(9, 3)
	assert.Equal(t, "prefill-0.mocker.internal", p.PrefillHost, "params carry the advertised host, not the bind address")
	assert.Equal(t, wide.Port(), p.PrefillPort)
	assert.Equal(t, SGLangParams{BootstrapHost: "prefill-0.mocker.internal", BootstrapPort: wide.Port(), BootstrapRoom: 9, BootstrapToken: wide.Token(9, 3)}, wide.SGLangParams(9, 3))
	assert.Equal(t, net.JoinHostPort("prefill-0.mocker.internal", strconv.Itoa(wide.Port())), wide.AdvertisedAddr())
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero value is valid", Config{}, ""},
		{"bad addr", Config{Addr: "localhost"}, "Addr"},
		{"negative rooms", Config{MaxRooms: -1}, "MaxRooms"},
		{"negative conns", Config{MaxConns: -1}, "MaxConns"},
		{"negative tombstones", Config{MaxTombstones: -1}, "MaxTombstones"},
		{"negative header timeout", Config{HeaderTimeout: -time.Second}, "HeaderTimeout"},
		{"negative pending wait", Config{PendingWait: -time.Second}, "PendingWait"},
		{"negative aborted ttl", Config{AbortedTTL: -time.Second}, "AbortedTTL"},
		{"negative completed ttl", Config{CompletedTTL: -time.Second}, "CompletedTTL"},
		{"wildcard bind needs advertised host", Config{Addr: "0.0.0.0:0"}, "AdvertisedHost"},
		{"empty host bind needs advertised host", Config{Addr: ":7000"}, "AdvertisedHost"},
		{"ipv6 wildcard bind needs advertised host", Config{Addr: "[::]:0"}, "AdvertisedHost"},
		{"advertised wildcard is not dialable", Config{AdvertisedHost: "0.0.0.0"}, "AdvertisedHost"},
		{"wildcard bind with advertised host", Config{Addr: "0.0.0.0:0", AdvertisedHost: "10.0.0.7"}, ""},
		{"advertised bracketed ipv6", Config{AdvertisedHost: "[::1]"}, "bare host"},
		{"advertised host with port", Config{AdvertisedHost: "prefill-0:7000"}, "bare host"},
		{"advertised ipv4 with port", Config{AdvertisedHost: "10.0.0.7:7000"}, "bare host"},
		{"advertised bare ipv6", Config{AdvertisedHost: "::1"}, ""},
		{"advertised ipv6 with zone", Config{AdvertisedHost: "fe80::1%eth0"}, ""},
		{"advertised name", Config{AdvertisedHost: "prefill-0.mocker.internal"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.field)
			_, newErr := New(tt.cfg)
			assert.Error(t, newErr, "New validates too")
		})
	}
}

func TestServer_StartTwiceIsError(t *testing.T) {
	t.Parallel()
	s := startServer(t, Config{})
	err := s.Start()
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrClosed))
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServer_LogsProtocolErrors(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := startServer(t, Config{Logger: logger, PendingWait: 20 * time.Millisecond})
	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), Header{Version: 9, TransferID: 1}.Append(nil)))
	id := NextTransferID()
	_, err := awaitOn(t.Context(), s, id, 1)
	require.ErrorIs(t, err, ErrProtocol)
	logs := out.String()
	assert.Contains(t, logs, "level=WARN")
	assert.Contains(t, logs, "unsupported protocol version")
	assert.Contains(t, logs, "transfer_id="+strconv.FormatUint(id, 10))
}

// TestServer_NeverAdvertisesTheUnspecifiedAddress: when Addr names a host
// that turns out to bind every interface (a name resolving to 0.0.0.0) and
// no AdvertisedHost is set, Start fails rather than hand decodes an address
// they cannot dial.
func TestServer_NeverAdvertisesTheUnspecifiedAddress(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Addr: "wide.example:0"})
	require.NoError(t, err)
	s.listen = func(network, _ string) (net.Listener, error) { return net.Listen(network, "0.0.0.0:0") }
	err = s.Start()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AdvertisedHost")
	require.NoError(t, s.Close())

	s, err = New(Config{Addr: "wide.example:0", AdvertisedHost: "10.0.0.7"})
	require.NoError(t, err)
	s.listen = func(network, _ string) (net.Listener, error) { return net.Listen(network, "0.0.0.0:0") }
	require.NoError(t, s.Start(), "an explicit AdvertisedHost is what decodes dial")
	assert.Equal(t, "10.0.0.7", s.AdvertisedHost())
	require.NoError(t, s.Close())
}

// TestServer_ConnectionLimitWarningIsRateLimited: a flood of refused
// connections logs one warning per interval, the next one counting those
// left out.
func TestServer_ConnectionLimitWarningIsRateLimited(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	clock := newFakeClock()
	s := startServer(t, Config{MaxConns: 1, Logger: logger, Now: clock.Now})
	id := NextTransferID()
	require.NoError(t, s.Open(id))
	res := awaitAsync(t.Context(), s, id, 1)
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, waitFor, time.Millisecond)

	for range 3 {
		assert.Equal(t, StatusError, rawExchange(t, s.Addr(), nil))
	}
	assert.Equal(t, 1, strings.Count(out.String(), "connection limit reached"), out.String())
	clock.Advance(time.Minute)
	assert.Equal(t, StatusError, rawExchange(t, s.Addr(), nil))
	logs := out.String()
	assert.Equal(t, 2, strings.Count(logs, "connection limit reached"), logs)
	assert.Contains(t, logs, "suppressed=2")

	require.NoError(t, s.Complete(id))
	require.NoError(t, receive(t, res, "ACK").err)
}

// awaitOn is Await with the token s issues for the transfer and request,
// as a decode holding the handoff params would call it.
func awaitOn(ctx context.Context, s *Server, transferID, requestID uint64) (Status, error) {
	return Await(ctx, s.AdvertisedAddr(), transferID, requestID, s.Token(transferID, requestID))
}

// TestServer_ResetForgetsEveryRoom: after Reset a decode waiting in an open
// or a pending room gets ERROR, and every id, a resolved one's included,
// can be opened again.
func TestServer_ResetForgetsEveryRoom(t *testing.T) {
	t.Parallel()
	arrived, onArrive := arrivals()
	s := startServer(t, Config{OnDecodeArrived: onArrive})
	done, aborted, open, pending := NextTransferID(), NextTransferID(), NextTransferID(), NextTransferID()
	require.NoError(t, s.Open(done))
	require.NoError(t, s.Complete(done))
	require.NoError(t, s.Abort(aborted))
	require.NoError(t, s.Open(open))
	inOpen := awaitAsync(t.Context(), s, open, 1)
	receive(t, arrived, "decode arrival")
	inPending := awaitAsync(t.Context(), s, pending, 2)
	eventuallyStats(t, s, Stats{OpenRooms: 1, PendingRooms: 1, Tombstones: 2, Conns: 2, Waiting: 2})

	s.Reset()
	for _, res := range []<-chan awaitResult{inOpen, inPending} {
		r := receive(t, res, "ERROR")
		assert.Equal(t, StatusError, r.status)
		require.ErrorIs(t, r.err, ErrProtocol)
	}
	eventuallyStats(t, s, Stats{})
	for _, id := range []uint64{done, aborted, open, pending} {
		require.NoError(t, s.Open(id), "transfer %d opens again", id)
	}
	res := awaitAsync(t.Context(), s, done, 3)
	receive(t, arrived, "decode arrival in the reopened room")
	require.NoError(t, s.Complete(done))
	expectACK(t, res)
}
