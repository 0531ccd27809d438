package worker

import (
	"errors"
	"maps"
	"slices"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/transfer"
)

// sessionRooms are the transfer rooms each router session opened on a
// prefill worker and has not closed. A session that ends (its router said
// goodbye, gave the worker up or is gone from etcd) takes its rooms with
// it: nobody would close them, and each would keep a place under
// MaxRooms for the rest of the worker's life.
type sessionRooms map[uint64]map[uint64]struct{}

func (r sessionRooms) opened(session, tid uint64) {
	if r[session] == nil {
		r[session] = map[uint64]struct{}{}
	}
	r[session][tid] = struct{}{}
}

func (r sessionRooms) closed(session, tid uint64) {
	delete(r[session], tid)
}

// take returns session's open rooms, in id order, and forgets them.
func (r sessionRooms) take(session uint64) []uint64 {
	tids := slices.Sorted(maps.Keys(r[session]))
	delete(r, session)
	return tids
}

// abortRooms aborts the rooms a closed session left open.
func (l *workerLoop) abortRooms(session uint64) {
	l.holds.drop(session)
	tids := l.rooms.take(session)
	if l.server == nil || len(tids) == 0 {
		return
	}
	for _, tid := range tids {
		if err := l.server.Abort(tid); err != nil && !errors.Is(err, bootstrap.ErrClosed) {
			l.log.Debug("room of a closed session not aborted", "transfer_id", tid, "err", err)
		}
	}
	l.log.Info("aborted the transfer rooms of a closed router session", "session", session, "rooms", len(tids))
}

// holdRooms pairs a prefill's holds with their transfer rooms. The worker
// closes a room itself when its hold ends (ACK to the decode when the KV
// was transferred, ABORT otherwise), at the engine's own instant: the
// router sends no close. A hold can end before its room is open (the
// router opens it when it hears the hold start, and an abort or a quick
// transfer can come first): the room is then closed as soon as it opens.
type holdRooms struct {
	open  map[uint64]holdRoom // request id → its hold's open room
	ended map[uint64]holdRoom // request id → a hold that ended with no room open yet
}

type holdRoom struct {
	session, tid uint64
	transferred  bool
}

func newHoldRooms() holdRooms {
	return holdRooms{open: map[uint64]holdRoom{}, ended: map[uint64]holdRoom{}}
}

// drop forgets session's rooms and holds: the session's end aborts its
// open rooms, and no room of its will open any more.
func (h holdRooms) drop(session uint64) {
	maps.DeleteFunc(h.open, func(_ uint64, r holdRoom) bool { return r.session == session })
	maps.DeleteFunc(h.ended, func(_ uint64, r holdRoom) bool { return r.session == session })
}

// roomOpened notes room tid of request id, opened for session, and closes
// it at once if the request's hold has already ended.
func (l *workerLoop) roomOpened(session, tid, id uint64) {
	if e, ok := l.holds.ended[id]; ok && e.session == session {
		delete(l.holds.ended, id)
		l.closeRoom(session, tid, e.transferred)
		return
	}
	l.holds.open[id] = holdRoom{session: session, tid: tid}
}

// holdsEnded closes the rooms of the holds out ends (before the output
// drops the requests' owners: a hold whose room is not open yet is kept
// under its session).
func (l *workerLoop) holdsEnded(out *engine.Output) {
	for _, ev := range out.Events {
		switch ev.Kind {
		case engine.EventHoldReleased:
		case engine.EventCancelled:
			// Withdrawn: the router closes nothing for it either; its room,
			// if open, goes with its session.
			delete(l.holds.open, ev.RequestID)
			continue
		default:
			continue
		}
		transferred := ev.Outcome == engine.Transferred
		if r, ok := l.holds.open[ev.RequestID]; ok {
			delete(l.holds.open, ev.RequestID)
			l.closeRoom(r.session, r.tid, transferred)
			continue
		}
		if o, ok := l.owned[ev.RequestID]; ok {
			l.holds.ended[ev.RequestID] = holdRoom{session: o.session, transferred: transferred}
		}
	}
}

// closeRoom gives room tid its outcome: ACK or ABORT to its decode.
func (l *workerLoop) closeRoom(session, tid uint64, transferred bool) {
	l.rooms.closed(session, tid)
	if err := transfer.Close(l.server, tid, transferred); err != nil {
		l.log.Warn("transfer outcome not delivered", "transfer_id", tid, "err", err)
	}
}
