package distributed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// TestRooms_AClosedSessionsRoomsAreAborted: the transfer rooms a router
// session opened and never closed go when the session ends, so they do
// not keep places under MaxRooms for the next session.
func TestRooms_AClosedSessionsRoomsAreAborted(t *testing.T) {
	t.Parallel()
	ls := services(t)
	const ns = "rooms"
	router := newTestRouter(t, ls, ns)
	startWorkers(t, ls, ns, worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`), MaxRooms: 4})
	d := newCoupledDriver(t, ls, ns, router)
	room := func(tid uint64) *plane.WireRoom {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case f := <-d.frames:
				for _, it := range f.Items {
					if it.Room != nil && it.Room.TID == tid {
						return it.Room
					}
				}
			case <-deadline:
				t.Fatalf("no answer for room %d", tid)
			}
		}
	}

	d.session = 31
	d.send(plane.Command{Op: plane.OpHello})
	for tid := uint64(1); tid <= 4; tid++ {
		d.send(plane.Command{Op: plane.OpOpenRoom, TID: tid, ID: tid})
		require.Empty(t, room(tid).Err, "room %d", tid)
	}
	d.send(plane.Command{Op: plane.OpOpenRoom, TID: 5, ID: 5})
	assert.Contains(t, room(5).Err, "MaxRooms=4", "the bound holds")
	d.send(plane.Command{Op: plane.OpBye})

	d.session, d.seq = 32, 0
	d.send(plane.Command{Op: plane.OpHello})
	d.send(plane.Command{Op: plane.OpOpenRoom, TID: 6, ID: 6})
	assert.Empty(t, room(6).Err, "the ended session's rooms no longer count")
}
