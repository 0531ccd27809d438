package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
)

// TestOwners_EntriesLiveAsLongAsTheirRequests: a worker keeps which
// session submitted each live request and forgets it by every path a
// request ends on the worker, so the record never outgrows the worker's
// live requests; a closed session's requests come back for withdrawal.
func TestOwners_EntriesLiveAsLongAsTheirRequests(t *testing.T) {
	var o owners
	for _, c := range []plane.Command{
		{Session: 1, Op: plane.OpSubmit, ID: 10},             // aggregated: its completion ends it
		{Session: 1, Op: plane.OpSubmit, ID: 11, Hold: true}, // a source: its hold outlives the completion
		{Session: 1, Op: plane.OpReserve, ID: 12},            // a destination
		{Session: 2, Op: plane.OpSubmit, ID: 20, Hold: true},
		{Session: 2, Op: plane.OpSubmit, ID: 21},
		{Session: 2, Op: plane.OpReserve, ID: 22},
		{Session: 2, Op: plane.OpSubmit, ID: 23},
		{Session: 1, Op: plane.OpSubmit, ID: 13},
		{Session: 1, Op: plane.OpSubmit, ID: 14},
	} {
		o.command(c)
	}
	o.output(&engine.Output{
		Completions: []engine.Completion{{RequestID: 10}, {RequestID: 11}, {RequestID: 20}},
		Rejections:  []engine.Rejection{{RequestID: 21}},
		Events:      []engine.Event{{Kind: engine.EventHoldReleased, RequestID: 20}, {Kind: engine.EventCancelled, RequestID: 13}},
	})
	o.command(plane.Command{Session: 1, Op: plane.OpCancelDestination, ID: 12})
	o.end(23) // refused at Submit
	assert.ElementsMatch(t, []uint64{11, 14, 22}, keys(o))

	assert.Equal(t, []ownedRequest{{id: 11}, {id: 14}}, o.take(1))
	assert.Equal(t, []ownedRequest{{id: 22, dest: true}}, o.take(2))
	assert.Empty(t, o)
	assert.Empty(t, o.take(1))
}

func keys(o owners) []uint64 {
	var out []uint64
	for id := range o {
		out = append(out, id)
	}
	return out
}
