package distributed

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// TestTick_VisitsOnlySessionsWithSomethingToRetry: a session is in the
// ticker's busy set while a command awaits its ack or applied frames
// await theirs, and leaves it once both are through, so idle workers cost
// the router's ticker nothing.
func TestTick_VisitsOnlySessionsWithSomethingToRetry(t *testing.T) {
	var sent []string
	tr := &transport{log: slog.New(slog.DiscardHandler), busy: map[*remote]struct{}{}}
	tr.publish = func(subject string, _ []byte) error {
		sent = append(sent, subject)
		return nil
	}
	key := plane.NewMACKey()
	w := &remote{t: tr, session: 7, key: key, mac: plane.NewMAC(key), held: map[uint64]*plane.Frame{},
		reg: plane.Registration{Name: "w", CmdSubject: "mocker.ns.1.cmd"}}
	busy := func() bool {
		tr.busyMu.Lock()
		defer tr.busyMu.Unlock()
		_, ok := tr.busy[w]
		return ok
	}
	w.send(plane.Command{Op: plane.OpHello})
	assert.True(t, busy(), "a command awaiting its ack")
	now := time.Now()
	w.take(&plane.Frame{Acks: []plane.SessionAck{{Session: 7, Seq: 1, From: 0}}}, now)
	assert.False(t, busy(), "acknowledged, no frames: idle")

	ready, _ := w.take(&plane.Frame{Seq: 0, Items: []plane.Item{{}}}, now)
	require.Len(t, ready, 1)
	assert.True(t, busy(), "a frame applied and not yet acknowledged")
	n := len(sent)
	w.retry(now.Add(plane.AckEvery), false)
	assert.Len(t, sent, n+1, "the ticker acknowledges the frame")
	assert.False(t, busy(), "the ack sent: idle again")

	w.take(&plane.Frame{Seq: 2, Items: []plane.Item{{}}}, now.Add(plane.AckEvery))
	assert.True(t, busy(), "frame 1 missing")
	w.end()
	assert.False(t, busy(), "an ended session leaves the set")
}
