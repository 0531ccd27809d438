package worker

import (
	"maps"
	"slices"
	"time"

	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// inbox is a worker's view of its routers' command streams: each
// session's commands are applied once, in Seq order.
type inbox struct {
	sessions map[uint64]*inSession
	// closed are ended sessions (by id, their router), oldest first in
	// closedOrder.
	closed      map[uint64]int64
	closedOrder []uint64
	// overflowed counts commands dropped at the held bounds.
	overflowed uint64
	keyBuf     []plane.Keyed // keys' result, reused
}

type inSession struct {
	applied  uint64                   // every Seq up to this one is applied
	from     uint64                   // the first frame Seq that can carry the session's work
	held     map[uint64]plane.Command // arrived ahead of a gap
	frameAck uint64                   // the next frame Seq the router expects
	heard    time.Time
	ackDue   bool  // an ack to send
	router   int64 // the router's lease id, from its hello
	key      []byte
	mac      *plane.MAC // key, kept ready
	// heldBytes is the size of held, as the commands' encoded bodies.
	heldBytes int
}

func newInbox() *inbox { return &inbox{sessions: map[uint64]*inSession{}, closed: map[uint64]int64{}} }

// open starts a session whose hello verified under key.
func (b *inbox) open(session uint64, router int64, key []byte, head uint64, now time.Time) {
	if b.sessions[session] == nil {
		b.sessions[session] = &inSession{from: head, held: map[uint64]plane.Command{}, router: router, key: key, mac: plane.NewMAC(key), heard: now}
	}
}

// key is session's MAC key; nil when the session is unknown.
func (b *inbox) key(session uint64) []byte {
	if s := b.sessions[session]; s != nil {
		return s.key
	}
	return nil
}

// mac is session's MAC; nil when the session is unknown.
func (b *inbox) mac(session uint64) *plane.MAC {
	if s := b.sessions[session]; s != nil {
		return s.mac
	}
	return nil
}

// keys are the live sessions' MAC keys, to seal a frame for all of them:
// valid until the next call (the slice is reused).
func (b *inbox) keys() []plane.Keyed {
	b.keyBuf = b.keyBuf[:0]
	for id, s := range b.sessions {
		if s.key != nil {
			b.keyBuf = append(b.keyBuf, plane.Keyed{ID: id, Key: s.key, MAC: s.mac})
		}
	}
	return b.keyBuf
}

// wasClosed reports whether session ended here.
func (b *inbox) wasClosed(session uint64) bool {
	_, ok := b.closed[session]
	return ok
}

// routerGone forgets the ended sessions of a router whose key is gone.
func (b *inbox) routerGone(router int64) {
	for id, r := range b.closed {
		if r == router {
			delete(b.closed, id)
		}
	}
	b.closedOrder = slices.DeleteFunc(b.closedOrder, func(id uint64) bool { _, ok := b.closed[id]; return !ok })
}

// session finds or starts c's session; head is the worker's next frame
// Seq, where a new session's frames start.
func (b *inbox) session(c plane.Command, head uint64, now time.Time) *inSession {
	s := b.sessions[c.Session]
	if s == nil {
		s = &inSession{from: head, held: map[uint64]plane.Command{}}
		b.sessions[c.Session] = s
	}
	s.heard = now
	s.frameAck = max(s.frameAck, c.Ack)
	if c.Router != 0 {
		s.router = c.Router
	}
	return s
}

// accept takes a numbered command of a session and returns the commands
// now ready to apply, in order: none for a duplicate (its ack is due
// again) or for one ahead of a gap (held).
func (b *inbox) accept(c plane.Command, head uint64, now time.Time) []plane.Command {
	s := b.session(c, head, now)
	switch {
	case c.Seq <= s.applied:
		s.ackDue = true
		return nil
	case c.Seq > s.applied+1:
		if _, ok := s.held[c.Seq]; !ok {
			n := commandSize(c)
			if len(s.held) >= plane.HeldCommandsMax || s.heldBytes+n > plane.HeldBytesMax {
				b.overflowed++
				return nil
			}
			s.held[c.Seq] = c
			s.heldBytes += n
		}
		return nil
	}
	ready := []plane.Command{c}
	s.applied = c.Seq
	for {
		n, ok := s.held[s.applied+1]
		if !ok {
			break
		}
		delete(s.held, n.Seq)
		s.heldBytes -= commandSize(n)
		ready = append(ready, n)
		s.applied = n.Seq
	}
	s.ackDue = true
	return ready
}

// commandSize is roughly what c takes held: its variable parts.
func commandSize(c plane.Command) int { return 128 + 4*len(c.Tokens) + len(c.Params) }

// forget ends a session (its router closed) and remembers it ended.
func (b *inbox) forget(session uint64) {
	s := b.sessions[session]
	if s == nil {
		return
	}
	delete(b.sessions, session)
	if _, ok := b.closed[session]; !ok {
		b.closed[session] = s.router
		b.closedOrder = append(b.closedOrder, session)
	}
	for len(b.closedOrder) > plane.ClosedSessionsMax {
		delete(b.closed, b.closedOrder[0])
		b.closedOrder = b.closedOrder[1:]
	}
}

// sessionsOf returns the sessions whose hello named router, in id order.
func (b *inbox) sessionsOf(router int64) []uint64 {
	var out []uint64
	for id, s := range b.sessions {
		if s.router == router {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// acks returns the acks due, by session, and clears them.
// ackDue reports whether a session has an ack to send.
func (b *inbox) ackDue() bool {
	for _, s := range b.sessions {
		if s.ackDue {
			return true
		}
	}
	return false
}

func (b *inbox) acks() []plane.SessionAck {
	var out []plane.SessionAck
	for id, s := range b.sessions {
		if s.ackDue {
			s.ackDue = false
			out = append(out, plane.SessionAck{Session: id, Seq: s.applied, From: s.from})
		}
	}
	slices.SortFunc(out, func(a, b plane.SessionAck) int { return cmpUint(a.Session, b.Session) })
	return out
}

// behind returns the acks of the sessions heard from within SessionIdle
// when one of them has not acknowledged every frame before head; none
// when every router is up to date.
func (b *inbox) behind(head uint64, now time.Time) []plane.SessionAck {
	for _, s := range b.sessions {
		if now.Sub(s.heard) <= plane.SessionIdle && s.frameAck < head {
			return b.active(now)
		}
	}
	return nil
}

// active returns the acks of the sessions heard from within SessionIdle.
func (b *inbox) active(now time.Time) []plane.SessionAck {
	var out []plane.SessionAck
	for id, s := range b.sessions {
		if now.Sub(s.heard) <= plane.SessionIdle {
			out = append(out, plane.SessionAck{Session: id, Seq: s.applied, From: s.from})
		}
	}
	slices.SortFunc(out, func(a, b plane.SessionAck) int { return cmpUint(a.Session, b.Session) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// frameBuffer keeps the last frames a worker published, encoded, for
// resending: consecutive Seqs, oldest first.
type frameBuffer struct {
	frames [][]byte
	next   uint64 // the Seq after the last kept frame
	bytes  int
}

// add keeps frame seq (the one after the last added).
func (b *frameBuffer) add(seq uint64, data []byte) {
	b.frames = append(b.frames, data)
	b.bytes += len(data)
	b.next = seq + 1
	for len(b.frames) > plane.FrameBufferFrames || (b.bytes > plane.FrameBufferBytes && len(b.frames) > 1) {
		b.bytes -= len(b.frames[0])
		b.frames[0] = nil
		b.frames = b.frames[1:]
	}
}

// oldest is the Seq of the oldest kept frame (next when none is kept).
func (b *frameBuffer) oldest() uint64 { return b.next - uint64(len(b.frames)) }

// since returns the frames from seq on; false when some of them are no
// longer kept.
func (b *frameBuffer) since(seq uint64) ([][]byte, bool) {
	if seq >= b.next {
		return nil, true
	}
	if seq < b.oldest() {
		return nil, false
	}
	return b.frames[seq-b.oldest():], true
}

// sessionList is every live session, in id order.
func (b *inbox) sessionList() []uint64 {
	return slices.Sorted(maps.Keys(b.sessions))
}
