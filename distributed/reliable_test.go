package distributed

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/engine"
)

// TestInbox_AppliesEachCommandOnceInOrder: duplicates are dropped (and
// acknowledged again), a command ahead of a gap waits for it.
func TestInbox_AppliesEachCommandOnceInOrder(t *testing.T) {
	t.Parallel()
	b := newInbox()
	now := time.Unix(0, 0)
	cmd := func(seq uint64) command { return command{Op: opCancel, Session: 7, Seq: seq, ID: seq} }
	seqs := func(cs []command) []uint64 {
		var out []uint64
		for _, c := range cs {
			out = append(out, c.Seq)
		}
		return out
	}
	assert.Equal(t, []uint64{1}, seqs(b.accept(cmd(1), 40, now)))
	assert.Equal(t, []sessionAck{{Session: 7, Seq: 1, From: 40}}, b.acks(), "the session's frames start at the head it met")
	assert.Empty(t, b.acks(), "an ack is sent once")
	assert.Empty(t, b.accept(cmd(3), 41, now), "3 waits for 2")
	assert.Empty(t, b.accept(cmd(4), 41, now), "4 waits for 2")
	assert.Empty(t, b.acks(), "nothing new applied")
	assert.Equal(t, []uint64{2, 3, 4}, seqs(b.accept(cmd(2), 41, now)))
	assert.Empty(t, b.accept(cmd(3), 42, now), "a duplicate is not applied again")
	assert.Equal(t, []sessionAck{{Session: 7, Seq: 4, From: 40}}, b.acks(), "a duplicate is acknowledged again")
}

// TestInbox_HeartbeatsOnlyWhileARouterLags: a worker tells its Head only
// while a live session has not acknowledged every frame.
func TestInbox_HeartbeatsOnlyWhileARouterLags(t *testing.T) {
	t.Parallel()
	b := newInbox()
	now := time.Unix(0, 0)
	b.accept(command{Op: opHello, Session: 3, Seq: 1, Ack: 5}, 5, now)
	assert.Empty(t, b.behind(5, now), "the router has every frame before 5")
	assert.Equal(t, []sessionAck{{Session: 3, Seq: 1, From: 5}}, b.behind(6, now))
	assert.Empty(t, b.behind(6, now.Add(sessionIdle+time.Second)), "a silent session is presumed gone")
	b.session(command{Op: opAck, Session: 3, Ack: 6}, 6, now)
	assert.Empty(t, b.behind(6, now))
	b.forget(3)
	assert.Empty(t, b.active(now))
}

// TestFrameBuffer_ResendsWhatItKeeps: frames still kept come back in
// order; frames pushed out are reported lost.
func TestFrameBuffer_ResendsWhatItKeeps(t *testing.T) {
	t.Parallel()
	b := frameBuffer{next: 1}
	got, ok := b.since(1)
	assert.True(t, ok)
	assert.Empty(t, got, "nothing sent yet")
	for seq := uint64(1); seq <= frameBufferFrames+2; seq++ {
		b.add(seq, []byte(strconv.FormatUint(seq, 10)))
	}
	assert.EqualValues(t, 3, b.oldest())
	_, ok = b.since(2)
	assert.False(t, ok, "frame 2 fell out")
	got, ok = b.since(frameBufferFrames + 1)
	require.True(t, ok)
	assert.Equal(t, [][]byte{[]byte(strconv.Itoa(frameBufferFrames + 1)), []byte(strconv.Itoa(frameBufferFrames + 2))}, got)
}

// restartNATS shuts the services' NATS server down, waits off, and starts
// a new one on the same port: every client loses its connection and
// whatever was in flight, and reconnects on its own.
func restartNATS(t *testing.T, ls *localServices, off time.Duration) {
	t.Helper()
	u, err := url.Parse(ls.natsURL)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	ls.nats.Shutdown()
	ls.nats.WaitForShutdown()
	time.Sleep(off)
	var s *natsserver.Server
	require.Eventually(t, func() bool {
		s, err = natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
		if err != nil {
			return false
		}
		go s.Start()
		if s.ReadyForConnections(5 * time.Second) {
			return true
		}
		s.Shutdown()
		return false
	}, 30*time.Second, 100*time.Millisecond, "NATS back on port %d", port)
	ls.nats = s
}

// TestReliable_NATSRestartWithRequestsInFlight restarts NATS while
// requests are in every phase on a prefill and a decode worker: commands
// and frames published during the outage are lost by NATS and must be
// sent again. Every request completes with exactly its tokens (nothing
// applied twice, nothing lost), every request is counted once, and the
// cluster drains to zero held, reserved and active blocks.
func TestReliable_NATSRestartWithRequestsInFlight(t *testing.T) {
	t.Parallel()
	ls := services(t)
	args := []byte(`{"speedup_ratio": 10}`)
	startWorkers(t, ls, "natsrel",
		WorkerConfig{Name: "p0", Role: engine.WorkerPrefill, Args: args},
		WorkerConfig{Name: "d0", Role: engine.WorkerDecode, Args: args})
	cfg := attachConfig(ls, "natsrel")
	// No hold may end on its timeout while NATS is away, however slow the
	// host: the point is that nothing is lost, not how holds age.
	cfg.Args["kv_transfer_abort_timeout_ms"] = 600000
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const vus, perVU, maxTokens = 8, 6, 300
	results := make(chan cluster.Result, vus*perVU)
	var wg sync.WaitGroup
	for range vus {
		wg.Go(func() {
			for range perVU {
				// Generous: a request still open then was lost.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				results <- c.Generate(ctx, cluster.Request{PromptTokens: 256, MaxTokens: maxTokens})
				cancel()
			}
		})
	}
	require.Eventually(t, func() bool {
		for _, w := range c.Stats().Workers {
			if w.Name == "d0" && w.Running >= 4 {
				return true
			}
		}
		return false
	}, time.Minute, 5*time.Millisecond, "requests decoding")
	restartNATS(t, ls, 300*time.Millisecond)
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		n++
		if assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error) {
			assert.Equal(t, maxTokens, r.OutputTokens, "output tokens of a request on %s → %s", r.PrefillWorker, r.DecodeWorker)
		}
	}
	assert.Equal(t, vus*perVU, n)

	s := drainedClean(t, c)
	assert.EqualValues(t, vus*perVU, s.Requests)
	assert.EqualValues(t, vus*perVU, s.Completed, "every request completed once")
	assert.Equal(t, s.Pins, s.PinsReleased+s.PinsAborted+s.PinsCancelled, "every hold ended")
	require.NoError(t, c.CheckInvariants())
}

// testRemote is a router session with no NATS under it: what it publishes
// is recorded.
func testRemote(t *testing.T) (*remote, func() []command) {
	t.Helper()
	var sent []command
	key := newMACKey()
	tr := &transport{log: slog.New(slog.DiscardHandler), publish: func(subject string, data []byte) error {
		tags, body, err := unseal(data)
		require.NoError(t, err)
		require.Len(t, tags, 1)
		require.True(t, verify(tags[0], key, dirCommand, subject, body), "sealed under the session's key")
		var c command
		require.NoError(t, json.Unmarshal(body, &c))
		require.Equal(t, tags[0].id, c.Session, "the tag names the command's session")
		sent = append(sent, c)
		return nil
	}}
	w := &remote{t: tr, reg: Registration{Name: "w0", CmdSubject: "cmd"}, session: 9, key: key, held: map[uint64]*frame{}}
	return w, func() []command {
		out := sent
		sent = nil
		return out
	}
}

func numbered(seq uint64, acks ...sessionAck) *frame {
	return &frame{Seq: seq, Head: seq + 1, Items: []item{{Arrived: &wireArrived{TID: seq}}}, Acks: acks}
}

func seqsOf(fs []*frame) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.Seq)
	}
	return out
}

// TestRemote_AppliesFramesOnceInOrderFromItsSessionsStart: frames before
// the session began are dropped, a gap is asked for again at once and
// held frames wait for it, a duplicate is not applied twice, and frames
// the worker no longer keeps are reported.
func TestRemote_AppliesFramesOnceInOrderFromItsSessionsStart(t *testing.T) {
	t.Parallel()
	w, sent := testRemote(t)
	now := time.Now()
	w.send(command{Op: opHello})
	assert.Equal(t, []command{{Op: opHello, Session: 9, Seq: 1}}, sent())

	ready, lost := w.take(numbered(4), now)
	assert.Empty(t, ready, "where the session starts is not known yet")
	ready, _ = w.take(numbered(5, sessionAck{Session: 9, Seq: 1, From: 5}), now)
	assert.Equal(t, []uint64{5}, seqsOf(ready), "frame 4 came before the session")
	assert.Empty(t, w.unacked, "the hello is acknowledged")

	ready, _ = w.take(numbered(7), now)
	assert.Empty(t, ready, "7 waits for 6")
	assert.Equal(t, []command{{Op: opResend, Session: 9, Ack: 6, From: 6}}, sent(), "the gap is asked for")
	ready, _ = w.take(numbered(6), now)
	assert.Equal(t, []uint64{6, 7}, seqsOf(ready))
	ready, _ = w.take(numbered(6), now)
	assert.Empty(t, ready, "a frame resent to another router is not applied twice")
	assert.Nil(t, lost)

	_, lost = w.take(&frame{Head: 12, Lost: &lostFrames{Session: 9, From: 8, Oldest: 10}}, now.Add(time.Second))
	assert.Equal(t, &lostFrames{Session: 9, From: 8, Oldest: 10}, lost)
	_, lost = w.take(&frame{Head: 12, Lost: &lostFrames{Session: 3, From: 8, Oldest: 10}}, now.Add(time.Second))
	assert.Nil(t, lost, "another router's loss")
	_, lost = w.take(&frame{Head: 12, Lost: &lostFrames{Session: 9, From: 7, Oldest: 10}}, now.Add(time.Second))
	assert.Nil(t, lost, "a stale answer: frame 7 came since")
}

// TestRemote_PublishesUnacknowledgedCommandsAgain: commands are kept until
// acknowledged and published again, in order, once the oldest waited
// retransmitAfter, or at once after a reconnect.
func TestRemote_PublishesUnacknowledgedCommandsAgain(t *testing.T) {
	t.Parallel()
	w, sent := testRemote(t)
	w.send(command{Op: opHello})
	w.send(command{Op: opCancel, ID: 42})
	assert.Len(t, sent(), 2)
	now := time.Now()
	w.retry(now, false)
	assert.Empty(t, sent(), "not waited long enough")
	w.retry(now.Add(retransmitAfter), false)
	assert.Equal(t, []command{{Op: opHello, Session: 9, Seq: 1}, {Op: opCancel, Session: 9, Seq: 2, ID: 42}}, sent())
	w.take(&frame{Head: 3, Acks: []sessionAck{{Session: 9, Seq: 1, From: 3}}}, now)
	w.retry(now, true)
	assert.Equal(t, []command{{Op: opCancel, Session: 9, Seq: 2, ID: 42, Ack: 3}, {Op: opResend, Session: 9, Ack: 3, From: 3}}, sent(),
		"after a reconnect: what is unacknowledged, and the frames from the next one")
	w.take(&frame{Head: 3, Acks: []sessionAck{{Session: 9, Seq: 2, From: 3}}}, now)
	w.retry(now.Add(time.Hour), false)
	assert.Empty(t, sent(), "everything acknowledged, every frame acknowledged")
	w.end()
	assert.Equal(t, []command{{Op: opBye, Session: 9, Ack: 3}}, sent())
	w.send(command{Op: opCancel, ID: 43})
	assert.Empty(t, sent(), "an ended session sends nothing")
}

// TestReliable_LostFramesFailTheirRequestsSayingSo: when the worker can
// no longer resend what a router missed (here its answer is forged), the
// requests on it end "error" saying so rather than hang, and the worker
// joins again under a new session and serves.
func TestReliable_LostFramesFailTheirRequestsSayingSo(t *testing.T) {
	t.Parallel()
	_, cfg := oneWorker(t, "gone")
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	const n = 3
	// Only a withdrawal ends them on the worker in time for the check below.
	results := longRequests(context.Background(), c, n)
	require.Eventually(t, func() bool { return c.Stats().Workers[0].Running == n }, time.Minute, 5*time.Millisecond)

	tr := c.Transport().(*transport)
	ws := tr.remotes()
	require.Len(t, ws, 1)
	w := ws[0]
	w.mu.Lock()
	// Ahead of what the router applies by the time it arrives.
	from := w.next + 1<<20
	lost := frame{Head: from + 5, Lost: &lostFrames{Session: w.session, From: from, Oldest: from + 3}}
	w.mu.Unlock()
	data, err := json.Marshal(lost)
	require.NoError(t, err)
	require.NoError(t, tr.nc.Publish(w.reg.OutSubject, seal(dirFrame, w.reg.OutSubject, data, keyed{id: w.session, key: w.key})))

	for range n {
		r := <-results
		assert.Equal(t, cluster.OutcomeError, r.Outcome)
		assert.Contains(t, r.Error, "worker w0 lost: frames")
		assert.Contains(t, r.Error, "no longer in its resend buffer")
	}
	// The worker's new session joins the loop after the old one's requests
	// ended: a request sent at once could reach the loop first and find no
	// worker.
	require.Eventually(t, func() bool { return tr.host.Workers()[engine.WorkerAggregated] == 1 },
		time.Minute, 5*time.Millisecond, "w0 never joined again")
	r := c.Generate(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 4})
	assert.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
	assert.Equal(t, "w0", r.DecodeWorker, "w0 joined again")
	// The closed session's requests were withdrawn on the worker too: its
	// pool is free for the new session's, not decoding for nobody.
	require.Eventually(t, func() bool {
		w := c.Stats().Workers[0]
		return w.Running == 0 && w.Waiting == 0 && w.ActiveBlocks == 0
	}, 20*time.Second, 10*time.Millisecond, "the lost session's requests still run on w0: %+v", c.Stats().Workers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Drain(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored, "request conservation")
	assert.EqualValues(t, n, s.Errored)
}

func TestInbox_SessionsOfARouter(t *testing.T) {
	b := newInbox()
	now := time.Now()
	b.accept(command{Op: opHello, Session: 5, Seq: 1, Router: 77}, 1, now)
	b.accept(command{Op: opHello, Session: 3, Seq: 1, Router: 77}, 1, now)
	b.accept(command{Op: opHello, Session: 4, Seq: 1, Router: 12}, 1, now)
	b.accept(command{Op: opSubmit, Session: 5, Seq: 2, ID: 1}, 1, now)
	assert.Equal(t, []uint64{3, 5}, b.sessionsOf(77), "a later command without Router keeps the session's router")
	assert.Equal(t, []uint64{4}, b.sessionsOf(12))
	assert.Empty(t, b.sessionsOf(99))
}
