package distributed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	startWorkers(t, ls, ns, WorkerConfig{Name: "p0", Role: engine.WorkerPrefill, Args: []byte(`{"speedup_ratio": 10}`), MaxRooms: 4})
	d := newCoupledDriver(t, ls, ns, router)
	room := func(tid uint64) *wireRoom {
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
	d.send(command{Op: opHello})
	for tid := uint64(1); tid <= 4; tid++ {
		d.send(command{Op: opOpenRoom, TID: tid, ID: tid})
		require.Empty(t, room(tid).Err, "room %d", tid)
	}
	d.send(command{Op: opOpenRoom, TID: 5, ID: 5})
	assert.Contains(t, room(5).Err, "MaxRooms=4", "the bound holds")
	d.send(command{Op: opBye})

	d.session, d.seq = 32, 0
	d.send(command{Op: opHello})
	d.send(command{Op: opOpenRoom, TID: 6, ID: 6})
	assert.Empty(t, room(6).Err, "the ended session's rooms no longer count")
}
