package worker

import (
	"encoding/json"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvstrand/mocker/distributed/internal/plane"
)

// The worker's gate, where its routers' sealed commands come in. What
// fails is dropped and counted by reason, never applied, and logged at
// most once per plane.RejectLogEvery.

// routerUp is a router's registration as a worker trusts it: its lease id
// and public key.
type routerUp struct {
	id  int64
	key string
}

// routerOf reads a router's key, trusting it only when it lives under the
// lease its id names (a key written without that lease is anybody's).
func routerOf(kv *mvccpb.KeyValue, log *slog.Logger) (routerUp, bool) {
	id, err := plane.InstanceOfKey(string(kv.Key))
	if err != nil || id == 0 {
		return routerUp{}, false
	}
	var r plane.RouterRegistration
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

// receiveSealed takes a command message as it came off NATS: one or more
// commands of one session (the router's commands of one loop turn, in
// their order) under one tag, its session's, which must verify under the
// session's key; a session's first message, whose first command is its
// hello, under the key derived from the router its hello names. The MAC
// covers the whole message: one command that fails drops them all.
func (l *workerLoop) receiveSealed(data []byte) {
	tags, body, err := plane.Unseal(data)
	if plane.IsVersionError(err) {
		l.rejected.Add(plane.RejectVersion)
		if l.rejected.LogDue() {
			l.log.Error("commands dropped at the worker's gate", "err", err)
		}
		return
	}
	if err != nil || len(tags) != 1 {
		l.reject(plane.RejectMalformed, 0)
		return
	}
	session := tags[0].ID
	key := l.inbox.key(session)
	if key == nil {
		l.hello(tags[0], body)
		return
	}
	if !l.inbox.mac(session).Verify(tags[0], plane.DirCommand, l.cmdSubj, body) {
		l.reject(plane.RejectBadMAC, session)
		return
	}
	cmds, ok := l.decodeBatch(body, session)
	if !ok {
		return
	}
	l.receiveBatch(cmds, session)
}

// decodeBatch reads a verified message's commands, which must all be of
// its tag's session; false (counted) when they are not.
func (l *workerLoop) decodeBatch(body []byte, session uint64) ([]plane.Command, bool) {
	cmds, err := plane.DecodeCommands(body, l.batch[:0])
	l.batch = cmds[:0]
	if err != nil {
		l.reject(plane.RejectMalformed, session)
		return nil, false
	}
	for _, c := range cmds {
		if c.Session != session {
			l.reject(plane.RejectMalformed, session)
			return nil, false
		}
	}
	return cmds, true
}

// receiveBatch applies a message's commands in their order.
func (l *workerLoop) receiveBatch(cmds []plane.Command, session uint64) {
	before := l.inbox.overflowed
	for i := range cmds {
		l.receive(cmds[i])
		cmds[i] = plane.Command{} // the batch buffer keeps no tokens
	}
	if l.inbox.overflowed != before {
		l.reject(plane.RejectLimit, session)
	}
}

// hello starts a session from its first message, when it verifies under
// the key of the router its first command, a hello, names. Anything else
// of an unknown session is dropped: a command that overtook its hello
// comes again with it.
func (l *workerLoop) hello(tag plane.SealTag, body []byte) {
	session := tag.ID
	if l.inbox.wasClosed(session) {
		// A late command of an ended session, or a replay: either way
		// nothing to do, and nothing to count.
		return
	}
	cmds, err := plane.DecodeCommands(body, l.batch[:0])
	l.batch = cmds[:0]
	if err != nil {
		l.reject(plane.RejectMalformed, session)
		return
	}
	c := cmds[0]
	if c.Op != plane.OpHello || c.Session != session || c.Seq != 1 {
		l.reject(plane.RejectUnknownSession, session)
		return
	}
	for _, c := range cmds[1:] {
		if c.Session != session {
			l.reject(plane.RejectMalformed, session)
			return
		}
	}
	pub, ok := l.routers[c.Router]
	if !ok {
		// A router registers before it says hello, but the worker may
		// hear of its key after the hello: the router says it again.
		l.reject(plane.RejectUnknownRouter, session)
		return
	}
	key, err := l.plane.SessionKey(pub, l.cfg.Namespace, l.id, c.Router, session)
	if err != nil || !plane.Verify(tag, key, plane.DirCommand, l.cmdSubj, body) {
		l.reject(plane.RejectBadMAC, session)
		return
	}
	if len(l.inbox.sessions) >= plane.MaxSealTags {
		l.reject(plane.RejectLimit, session)
		return
	}
	l.inbox.open(session, c.Router, key, l.seq, time.Now())
	l.receiveBatch(cmds, session)
}

// reject counts a dropped command and says so, now and then.
func (l *workerLoop) reject(reason string, session uint64) {
	l.rejected.Add(reason)
	if l.rejected.LogDue() {
		l.log.Warn("commands dropped at the worker's gate", "last_reason", reason, "last_session", session,
			"dropped", l.rejected.ByReason())
	}
}
