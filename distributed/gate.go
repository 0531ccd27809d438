package distributed

import (
	"encoding/json"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The gates where sealed messages (seal.go) come in: a worker's commands
// and a router's frames. What fails is dropped and counted by reason,
// never applied, and logged at most once per rejectLogEvery.

// rejectLogEvery spaces the warnings about dropped messages: a flood of
// forged ones must not become a flood of logs.
const rejectLogEvery = 5 * time.Second

// routerUp is a router's registration as a worker trusts it: its lease id
// and public key.
type routerUp struct {
	id  int64
	key string
}

// routerOf reads a router's key, trusting it only when it lives under the
// lease its id names (a key written without that lease is anybody's).
func routerOf(kv *mvccpb.KeyValue, log *slog.Logger) (routerUp, bool) {
	id, err := instanceOfKey(string(kv.Key))
	if err != nil || id == 0 {
		return routerUp{}, false
	}
	var r RouterRegistration
	switch {
	case json.Unmarshal(kv.Value, &r) != nil:
		log.Warn("router key ignored: unreadable", "key", string(kv.Key))
	case kv.Lease != id || r.RouterID != id:
		log.Warn("router key ignored: not under the lease its id names", "key", string(kv.Key), "lease", kv.Lease)
	case r.PlaneKey == "":
		log.Warn("router key ignored: no plane_key (a router of an older mocker?)", "key", string(kv.Key))
	default:
		return routerUp{id: id, key: r.PlaneKey}, true
	}
	return routerUp{}, false
}

// receiveSealed takes a command as it came off NATS: one tag, its
// session's, which must verify under the session's key; a session's first
// command, its hello, under the key derived from the router its hello
// names.
func (l *workerLoop) receiveSealed(data []byte) {
	tags, body, err := unseal(data)
	if err != nil || len(tags) != 1 {
		l.reject(rejectMalformed, 0)
		return
	}
	session := tags[0].id
	key := l.inbox.key(session)
	if key == nil {
		l.hello(tags[0], body)
		return
	}
	if !verify(tags[0], key, dirCommand, l.cmdSubj, body) {
		l.reject(rejectBadMAC, session)
		return
	}
	var c command
	if err := json.Unmarshal(body, &c); err != nil || c.Session != session {
		l.reject(rejectMalformed, session)
		return
	}
	before := l.inbox.overflowed
	l.receive(c)
	if l.inbox.overflowed != before {
		l.reject(rejectLimit, session)
	}
}

// hello starts a session from its first command, when it verifies under
// the key of the router it names. Anything else of an unknown session is
// dropped: a command that overtook its hello comes again with it.
func (l *workerLoop) hello(tag sealTag, body []byte) {
	session := tag.id
	if l.inbox.wasClosed(session) {
		// A late command of an ended session, or a replay: either way
		// nothing to do, and nothing to count.
		return
	}
	var c command
	if err := json.Unmarshal(body, &c); err != nil {
		l.reject(rejectMalformed, session)
		return
	}
	if c.Op != opHello || c.Session != session || c.Seq != 1 {
		l.reject(rejectUnknownSession, session)
		return
	}
	pub, ok := l.routers[c.Router]
	if !ok {
		// A router registers before it says hello, but the worker may
		// hear of its key after the hello: the router says it again.
		l.reject(rejectUnknownRouter, session)
		return
	}
	key, err := l.plane.sessionKey(pub, l.cfg.Namespace, l.id, c.Router, session)
	if err != nil || !verify(tag, key, dirCommand, l.cmdSubj, body) {
		l.reject(rejectBadMAC, session)
		return
	}
	if len(l.inbox.sessions) >= maxSealTags {
		l.reject(rejectLimit, session)
		return
	}
	l.inbox.open(session, c.Router, key, l.seq, time.Now())
	l.receive(c)
}

// reject counts a dropped command and says so, now and then.
func (l *workerLoop) reject(reason string, session uint64) {
	l.rejected.add(reason)
	if now := time.Now(); now.Sub(l.rejectLogged) >= rejectLogEvery {
		l.rejectLogged = now
		l.log.Warn("commands dropped at the worker's gate", "last_reason", reason, "last_session", session,
			"dropped", l.rejected.byReason())
	}
}

// openFrame checks a frame off a worker's out subject for session w: it
// must carry w's tag, verified, or be this router's own departure marker
// for the worker. ok false: drop it (counted when it claimed to be for
// the session, or came when every frame must be).
func (t *transport) openFrame(w *remote, subject string, data []byte) (f *frame, ok bool) {
	tags, body, err := unseal(data)
	if err != nil {
		t.reject(w, rejectMalformed)
		return nil, false
	}
	f = new(frame)
	if tag, mine := tagOf(tags, t.leaveID); mine {
		if !verify(tag, t.leaveKey, dirFrame, subject, body) || json.Unmarshal(body, f) != nil || f.Leave == "" {
			t.reject(w, rejectBadMAC)
			return nil, false
		}
		return f, true
	}
	tag, mine := tagOf(tags, w.session)
	switch {
	case !mine:
		// Frames from before the session's hello was taken do not carry
		// its tag; after it, every frame does.
		w.mu.Lock()
		based := w.based
		w.mu.Unlock()
		if based {
			t.reject(w, rejectUnknownSession)
		}
		return nil, false
	case !verify(tag, w.key, dirFrame, subject, body):
		t.reject(w, rejectBadMAC)
		return nil, false
	case json.Unmarshal(body, f) != nil || f.Leave != "":
		// A departure is the router's own word, never the worker's.
		t.reject(w, rejectMalformed)
		return nil, false
	}
	return f, true
}

// reject counts a dropped frame and says so, now and then.
func (t *transport) reject(w *remote, reason string) {
	t.rejected.add(reason)
	t.mu.Lock()
	now := time.Now()
	log := now.Sub(t.rejectLogged) >= rejectLogEvery
	if log {
		t.rejectLogged = now
	}
	t.mu.Unlock()
	if log {
		t.log.Warn("frames dropped at the router's gate", "worker", w.reg.Name, "last_reason", reason, "dropped", t.rejected.byReason())
	}
}

// PlaneStats counts what the request plane dropped at its gates: frames
// at this router, and commands at its workers as they last reported.
type PlaneStats struct {
	// Rejected is every message dropped: RejectedFrames plus the sum of
	// WorkerRejected.
	Rejected uint64 `json:"rejected"`
	// RejectedFrames counts, by reason, the frames this router dropped.
	RejectedFrames map[string]uint64 `json:"rejected_frames,omitempty"`
	// WorkerRejected is, by worker name, the commands each worker has
	// dropped since it started, as its last frame said.
	WorkerRejected map[string]uint64 `json:"worker_rejected,omitempty"`
}

// PlaneStats is what the router's request plane dropped so far; the
// counter a run's summary shows as mocker_plane_rejected_total.
func (t *transport) PlaneStats() PlaneStats {
	s := PlaneStats{RejectedFrames: t.rejected.byReason(), WorkerRejected: map[string]uint64{}}
	s.Rejected = t.rejected.total()
	t.mu.Lock()
	for name, n := range t.workerRejected {
		s.WorkerRejected[name] = n
		s.Rejected += n
	}
	t.mu.Unlock()
	return s
}

// PlaneRejected is PlaneStats().Rejected, for summaries.
func (t *transport) PlaneRejected() uint64 { return t.PlaneStats().Rejected }
