package distributed

import (
	"context"
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
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

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
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: args},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: args})
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
	assert.Equal(t, s.Holds, s.HoldsReleased+s.HoldsAborted+s.HoldsCancelled, "every hold ended")
	require.NoError(t, c.CheckInvariants())
}

// testRemote is a router session with no NATS under it: what it publishes
// is recorded.
func testRemote(t *testing.T) (*remote, func() []plane.Command) {
	t.Helper()
	var sent []plane.Command
	key := plane.NewMACKey()
	tr := &transport{log: slog.New(slog.DiscardHandler), publish: func(subject string, data []byte) error {
		tags, body, err := plane.Unseal(data)
		require.NoError(t, err)
		require.Len(t, tags, 1)
		require.True(t, plane.Verify(tags[0], key, plane.DirCommand, subject, body), "sealed under the session's key")
		cmds, err := plane.DecodeCommands(body, nil)
		require.NoError(t, err)
		for _, c := range cmds {
			require.Equal(t, tags[0].ID, c.Session, "the tag names the command's session")
		}
		sent = append(sent, cmds...)
		return nil
	}}
	w := &remote{t: tr, reg: plane.Registration{Name: "w0", CmdSubject: "cmd"}, session: 9, key: key, mac: plane.NewMAC(key), held: map[uint64]*plane.Frame{}}
	return w, func() []plane.Command {
		w.Flush() // the end of the loop's turn
		out := sent
		sent = nil
		return out
	}
}

func numbered(seq uint64, acks ...plane.SessionAck) *plane.Frame {
	return &plane.Frame{Seq: seq, Head: seq + 1, Items: []plane.Item{{Arrived: &plane.WireArrived{TID: seq}}}, Acks: acks}
}

func seqsOf(fs []*plane.Frame) []uint64 {
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
	w.send(plane.Command{Op: plane.OpHello})
	assert.Equal(t, []plane.Command{{Op: plane.OpHello, Session: 9, Seq: 1}}, sent())

	ready, lost := w.take(numbered(4), now)
	assert.Empty(t, ready, "where the session starts is not known yet")
	ready, _ = w.take(numbered(5, plane.SessionAck{Session: 9, Seq: 1, From: 5}), now)
	assert.Equal(t, []uint64{5}, seqsOf(ready), "frame 4 came before the session")
	assert.Empty(t, w.unacked, "the hello is acknowledged")

	ready, _ = w.take(numbered(7), now)
	assert.Empty(t, ready, "7 waits for 6")
	assert.Equal(t, []plane.Command{{Op: plane.OpResend, Session: 9, Ack: 6, From: 6}}, sent(), "the gap is asked for")
	ready, _ = w.take(numbered(6), now)
	assert.Equal(t, []uint64{6, 7}, seqsOf(ready))
	ready, _ = w.take(numbered(6), now)
	assert.Empty(t, ready, "a frame resent to another router is not applied twice")
	assert.Nil(t, lost)

	_, lost = w.take(&plane.Frame{Head: 12, Lost: &plane.LostFrames{Session: 9, From: 8, Oldest: 10}}, now.Add(time.Second))
	assert.Equal(t, &plane.LostFrames{Session: 9, From: 8, Oldest: 10}, lost)
	_, lost = w.take(&plane.Frame{Head: 12, Lost: &plane.LostFrames{Session: 3, From: 8, Oldest: 10}}, now.Add(time.Second))
	assert.Nil(t, lost, "another router's loss")
	_, lost = w.take(&plane.Frame{Head: 12, Lost: &plane.LostFrames{Session: 9, From: 7, Oldest: 10}}, now.Add(time.Second))
	assert.Nil(t, lost, "a stale answer: frame 7 came since")
}

// TestRemote_PublishesUnacknowledgedCommandsAgain: commands are kept until
// acknowledged and published again, in order, once the oldest waited
// RetransmitAfter, or at once after a reconnect.
func TestRemote_PublishesUnacknowledgedCommandsAgain(t *testing.T) {
	t.Parallel()
	w, sent := testRemote(t)
	w.send(plane.Command{Op: plane.OpHello})
	w.send(plane.Command{Op: plane.OpCancel, ID: 42})
	assert.Len(t, sent(), 2)
	now := time.Now()
	w.retry(now, false)
	assert.Empty(t, sent(), "not waited long enough")
	w.retry(now.Add(plane.RetransmitAfter), false)
	assert.Equal(t, []plane.Command{{Op: plane.OpHello, Session: 9, Seq: 1}, {Op: plane.OpCancel, Session: 9, Seq: 2, ID: 42}}, sent())
	w.take(&plane.Frame{Head: 3, Acks: []plane.SessionAck{{Session: 9, Seq: 1, From: 3}}}, now)
	w.retry(now, true)
	assert.Equal(t, []plane.Command{{Op: plane.OpCancel, Session: 9, Seq: 2, ID: 42, Ack: 3}, {Op: plane.OpResend, Session: 9, Ack: 3, From: 3}}, sent(),
		"after a reconnect: what is unacknowledged, and the frames from the next one")
	w.take(&plane.Frame{Head: 3, Acks: []plane.SessionAck{{Session: 9, Seq: 2, From: 3}}}, now)
	w.retry(now.Add(time.Hour), false)
	assert.Empty(t, sent(), "everything acknowledged, every frame acknowledged")
	w.end()
	assert.Equal(t, []plane.Command{{Op: plane.OpBye, Session: 9, Ack: 3}}, sent())
	w.send(plane.Command{Op: plane.OpCancel, ID: 43})
	assert.Empty(t, sent(), "an ended session sends nothing")
}

// TestRemote_SendsATurnsCommandsAsOneMessage: the commands given to a
// worker in one loop turn wait for the turn's end (Flush) and go as one
// message under one MAC, in Seq order, each carrying the frame ack; a turn
// whose prompts outgrow commandBatchBytes is split, losing nothing.
func TestRemote_SendsATurnsCommandsAsOneMessage(t *testing.T) {
	t.Parallel()
	key := plane.NewMACKey()
	var messages [][]plane.Command
	tr := &transport{log: slog.New(slog.DiscardHandler), publish: func(subject string, data []byte) error {
		tags, body, err := plane.Unseal(data)
		require.NoError(t, err)
		require.Len(t, tags, 1, "one MAC for the message")
		require.True(t, plane.Verify(tags[0], key, plane.DirCommand, subject, body), "the MAC covers the whole message")
		cmds, err := plane.DecodeCommands(body, nil)
		require.NoError(t, err)
		messages = append(messages, cmds)
		return nil
	}}
	w := &remote{t: tr, reg: plane.Registration{Name: "w0", CmdSubject: "cmd"}, session: 9, key: key, mac: plane.NewMAC(key), held: map[uint64]*plane.Frame{}}
	w.based, w.next = true, 4

	w.Apply(engine.Cancel{ID: 1})
	w.OpenRoom(7, 2)
	w.OpenRoom(6, 3)
	assert.Empty(t, messages, "nothing goes before the turn ends")
	w.Flush()
	require.Len(t, messages, 1, "the turn's commands in one message")
	var seqs []uint64
	for _, c := range messages[0] {
		seqs = append(seqs, c.Seq)
		assert.EqualValues(t, 4, c.Ack, "every command carries the frame ack")
		assert.EqualValues(t, 9, c.Session)
	}
	assert.Equal(t, []uint64{1, 2, 3}, seqs)
	assert.Equal(t, []string{plane.OpCancel, plane.OpOpenRoom, plane.OpOpenRoom}, []string{messages[0][0].Op, messages[0][1].Op, messages[0][2].Op})
	w.Flush()
	assert.Len(t, messages, 1, "an empty turn sends nothing")

	// Long prompts: more than one message, every command once, in order.
	messages = nil
	prompt := make([]uint32, 6000) // 24 KB on the wire
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	for i := range 8 {
		w.Apply(&engine.Submit{Request: engine.Request{ID: uint64(100 + i), Tokens: prompt, MaxTokens: 1}})
	}
	w.Flush()
	assert.Greater(t, len(messages), 1, "split under commandBatchBytes")
	assert.Less(t, len(messages), 8, "still batched")
	seqs = nil
	for _, m := range messages {
		for _, c := range m {
			seqs = append(seqs, c.Seq)
			assert.Equal(t, prompt, c.Tokens)
		}
	}
	assert.Equal(t, []uint64{4, 5, 6, 7, 8, 9, 10, 11}, seqs)
	assert.Len(t, w.unacked, 11, "kept until acknowledged")
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
	lost := plane.Frame{Head: from + 5, Lost: &plane.LostFrames{Session: w.session, From: from, Oldest: from + 3}}
	w.mu.Unlock()
	data, err := plane.EncodeFrame(&lost)
	require.NoError(t, err)
	require.NoError(t, tr.nc.Publish(w.reg.OutSubject, plane.Seal(plane.DirFrame, w.reg.OutSubject, data, plane.Keyed{ID: w.session, Key: w.key})))

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

// TestGate_AnotherWireVersionIsCounted: a frame of another wire version
// (version 1's JSON) is dropped and counted under its own reason, not
// taken for a forgery.
func TestGate_AnotherWireVersionIsCounted(t *testing.T) {
	t.Parallel()
	tr := &transport{log: slog.New(slog.DiscardHandler)}
	w := &remote{t: tr}
	_, ok := tr.openFrame(w, "mocker.ns.1.out", append([]byte{1, 0, 0}, `{"seq":1}`...))
	require.False(t, ok)
	assert.Equal(t, map[string]uint64{plane.RejectVersion: 1}, tr.rejected.ByReason())
}
