package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// TestInbox_AppliesEachCommandOnceInOrder: duplicates are dropped (and
// acknowledged again), a command ahead of a gap waits for it.
func TestInbox_AppliesEachCommandOnceInOrder(t *testing.T) {
	t.Parallel()
	b := newInbox()
	now := time.Unix(0, 0)
	cmd := func(seq uint64) plane.Command {
		return plane.Command{Op: plane.OpCancel, Session: 7, Seq: seq, ID: seq}
	}
	seqs := func(cs []plane.Command) []uint64 {
		var out []uint64
		for _, c := range cs {
			out = append(out, c.Seq)
		}
		return out
	}
	assert.False(t, b.ackDue(), "nothing to acknowledge yet")
	assert.Equal(t, []uint64{1}, seqs(b.accept(cmd(1), 40, now)))
	assert.True(t, b.ackDue(), "an applied command is due an ack")
	assert.Equal(t, []plane.SessionAck{{Session: 7, Seq: 1, From: 40}}, b.acks(), "the session's frames start at the head it met")
	assert.False(t, b.ackDue(), "taken")
	assert.Empty(t, b.acks(), "an ack is sent once")
	assert.Empty(t, b.accept(cmd(3), 41, now), "3 waits for 2")
	assert.Empty(t, b.accept(cmd(4), 41, now), "4 waits for 2")
	assert.Empty(t, b.acks(), "nothing new applied")
	assert.Equal(t, []uint64{2, 3, 4}, seqs(b.accept(cmd(2), 41, now)))
	assert.Empty(t, b.accept(cmd(3), 42, now), "a duplicate is not applied again")
	assert.Equal(t, []plane.SessionAck{{Session: 7, Seq: 4, From: 40}}, b.acks(), "a duplicate is acknowledged again")
}

// TestInbox_HeartbeatsOnlyWhileARouterLags: a worker tells its Head only
// while a live session has not acknowledged every frame.
func TestInbox_HeartbeatsOnlyWhileARouterLags(t *testing.T) {
	t.Parallel()
	b := newInbox()
	now := time.Unix(0, 0)
	b.accept(plane.Command{Op: plane.OpHello, Session: 3, Seq: 1, Ack: 5}, 5, now)
	assert.Empty(t, b.behind(5, now), "the router has every frame before 5")
	assert.Equal(t, []plane.SessionAck{{Session: 3, Seq: 1, From: 5}}, b.behind(6, now))
	assert.Empty(t, b.behind(6, now.Add(plane.SessionIdle+time.Second)), "a silent session is presumed gone")
	b.session(plane.Command{Op: plane.OpAck, Session: 3, Ack: 6}, 6, now)
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
	for seq := uint64(1); seq <= plane.FrameBufferFrames+2; seq++ {
		b.add(seq, []byte(strconv.FormatUint(seq, 10)))
	}
	assert.EqualValues(t, 3, b.oldest())
	_, ok = b.since(2)
	assert.False(t, ok, "frame 2 fell out")
	got, ok = b.since(plane.FrameBufferFrames + 1)
	require.True(t, ok)
	assert.Equal(t, [][]byte{[]byte(strconv.Itoa(plane.FrameBufferFrames + 1)), []byte(strconv.Itoa(plane.FrameBufferFrames + 2))}, got)
}

func TestInbox_SessionsOfARouter(t *testing.T) {
	b := newInbox()
	now := time.Now()
	b.accept(plane.Command{Op: plane.OpHello, Session: 5, Seq: 1, Router: 77}, 1, now)
	b.accept(plane.Command{Op: plane.OpHello, Session: 3, Seq: 1, Router: 77}, 1, now)
	b.accept(plane.Command{Op: plane.OpHello, Session: 4, Seq: 1, Router: 12}, 1, now)
	b.accept(plane.Command{Op: plane.OpSubmit, Session: 5, Seq: 2, ID: 1}, 1, now)
	assert.Equal(t, []uint64{3, 5}, b.sessionsOf(77), "a later command without Router keeps the session's router")
	assert.Equal(t, []uint64{4}, b.sessionsOf(12))
	assert.Empty(t, b.sessionsOf(99))
}

// TestInbox_HeldCommandsAreBounded: commands ahead of a gap are held up
// to HeldCommandsMax; past it they are dropped and counted, and the gap's
// filling applies the held ones.
func TestInbox_HeldCommandsAreBounded(t *testing.T) {
	t.Parallel()
	b := newInbox()
	b.open(7, 1, plane.NewMACKey(), 1, time.Unix(0, 0))
	for seq := uint64(2); seq < plane.HeldCommandsMax+12; seq++ {
		b.accept(plane.Command{Op: plane.OpCancel, Session: 7, Seq: seq}, 1, time.Unix(0, 0))
	}
	assert.Len(t, b.sessions[7].held, plane.HeldCommandsMax)
	assert.EqualValues(t, 10, b.overflowed)
	ready := b.accept(plane.Command{Op: plane.OpCancel, Session: 7, Seq: 1}, 1, time.Unix(0, 0))
	assert.Len(t, ready, plane.HeldCommandsMax+1)
	assert.Zero(t, b.sessions[7].heldBytes)
}

// TestInbox_AnEndedSessionIsRemembered: a session forgotten stays known
// as ended (a replayed hello must not start it again) until its router's
// key goes.
func TestInbox_AnEndedSessionIsRemembered(t *testing.T) {
	t.Parallel()
	b := newInbox()
	b.open(7, 1, plane.NewMACKey(), 1, time.Unix(0, 0))
	b.open(8, 2, plane.NewMACKey(), 1, time.Unix(0, 0))
	b.forget(7)
	b.forget(8)
	assert.Nil(t, b.key(7))
	assert.True(t, b.wasClosed(7))
	b.routerGone(1)
	assert.False(t, b.wasClosed(7))
	assert.True(t, b.wasClosed(8))
}
