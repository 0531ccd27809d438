package worker

import (
	"cmp"
	"slices"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
)

// owners is a worker's record of which router session submitted each of
// its live requests, so that when a session closes (bye) the requests
// nobody waits for any longer can be withdrawn. An entry lives from the
// Submit or Reserve to whatever ends the request on this worker: its
// completion (unless it then holds its KV), the end of its hold, a
// cancellation, a refusal, or the router's own release or cancel.
type owners map[uint64]owner

type owner struct {
	session uint64
	hold    bool // a source that holds its KV once its prefill completes
	dest    bool // a handoff destination (Reserve)
}

// ownedRequest is one request withdrawn from a closed session.
type ownedRequest struct {
	id   uint64
	dest bool
}

// command notes what a session's command does to its requests.
func (o *owners) command(c plane.Command) {
	switch c.Op {
	case plane.OpSubmit, plane.OpReserve:
		if *o == nil {
			*o = owners{}
		}
		(*o)[c.ID] = owner{session: c.Session, hold: c.Op == plane.OpSubmit && c.Hold, dest: c.Op == plane.OpReserve}
	case plane.OpReleaseHeld, plane.OpCancel, plane.OpCancelDestination:
		o.end(c.ID)
	}
}

// output drops the requests an engine output ends.
func (o owners) output(out *engine.Output) {
	if len(o) == 0 {
		return
	}
	for _, c := range out.Completions {
		if w, ok := o[c.RequestID]; ok && !w.hold {
			delete(o, c.RequestID)
		}
	}
	for _, r := range out.Rejections {
		delete(o, r.RequestID)
	}
	for _, ev := range out.Events {
		switch ev.Kind {
		case engine.EventHoldReleased, engine.EventCancelled, engine.EventDestinationCancelled:
			delete(o, ev.RequestID)
		}
	}
}

func (o owners) end(id uint64) { delete(o, id) }

// take removes and returns the live requests of session, in id order.
func (o owners) take(session uint64) []ownedRequest {
	var out []ownedRequest
	for id, w := range o {
		if w.session == session {
			out = append(out, ownedRequest{id: id, dest: w.dest})
			delete(o, id)
		}
	}
	slices.SortFunc(out, func(a, b ownedRequest) int { return cmp.Compare(a.id, b.id) })
	return out
}
