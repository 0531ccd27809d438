package worker

import (
	"errors"
	"maps"
	"slices"

	"github.com/kvstrand/mocker/bootstrap"
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
