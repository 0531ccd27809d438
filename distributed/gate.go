package distributed

import "github.com/kvstrand/mocker/distributed/internal/plane"

// The gate where sealed messages (plane.Seal) come in at a router: its
// workers' frames. What fails is dropped and counted by reason, never
// applied, and logged at most once per plane.RejectLogEvery (a worker's
// gate for commands is distributed/worker's).

// openFrame checks a frame off a worker's out subject for session w: it
// must carry w's tag, verified, or be this router's own departure marker
// for the worker. ok false: drop it (counted when it claimed to be for
// the session, or came when every frame must be).
func (t *transport) openFrame(w *remote, subject string, data []byte) (f *plane.Frame, ok bool) {
	tags, body, err := plane.Unseal(data)
	if err != nil {
		if plane.IsVersionError(err) {
			t.rejectVersion(w, err)
			return nil, false
		}
		t.reject(w, plane.RejectMalformed)
		return nil, false
	}
	f = new(plane.Frame)
	if tag, mine := plane.TagOf(tags, t.leaveID); mine {
		if !plane.Verify(tag, t.leaveKey, plane.DirFrame, subject, body) || plane.DecodeFrame(body, f) != nil || f.Leave == "" {
			t.reject(w, plane.RejectBadMAC)
			return nil, false
		}
		return f, true
	}
	tag, mine := plane.TagOf(tags, w.session)
	switch {
	case !mine:
		// Frames from before the session's hello was taken do not carry
		// its tag; after it, every frame does.
		w.mu.Lock()
		based := w.based
		w.mu.Unlock()
		if based {
			t.reject(w, plane.RejectUnknownSession)
		}
		return nil, false
	case !w.mac.Verify(tag, plane.DirFrame, subject, body):
		t.reject(w, plane.RejectBadMAC)
		return nil, false
	case plane.DecodeFrame(body, f) != nil || f.Leave != "":
		// A departure is the router's own word, never the worker's.
		t.reject(w, plane.RejectMalformed)
		return nil, false
	}
	return f, true
}

// rejectVersion counts a frame of another wire version and says which,
// now and then: the worker runs another mocker release.
func (t *transport) rejectVersion(w *remote, err error) {
	t.rejected.Add(plane.RejectVersion)
	if t.rejected.LogDue() {
		t.log.Error("frames dropped at the router's gate", "worker", w.reg.Name, "err", err)
	}
}

// reject counts a dropped frame and says so, now and then.
func (t *transport) reject(w *remote, reason string) {
	t.rejected.Add(reason)
	if t.rejected.LogDue() {
		t.log.Warn("frames dropped at the router's gate", "worker", w.reg.Name, "last_reason", reason, "dropped", t.rejected.ByReason())
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
	s := PlaneStats{RejectedFrames: t.rejected.ByReason(), WorkerRejected: map[string]uint64{}}
	s.Rejected = t.rejected.Total()
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
