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

// TestRooms_APrefillClosesItsOwnRoomWhenItsHoldEnds: no router command
// closes a transfer room; the prefill closes it when the hold ends, here
// at its abort deadline, and a hold that ended before its room opened has
// the room closed as it opens. With one room allowed, each later room
// opens only because the one before it was closed.
func TestRooms_APrefillClosesItsOwnRoomWhenItsHoldEnds(t *testing.T) {
	t.Parallel()
	ls := services(t)
	const ns = "ownclose"
	router := newTestRouter(t, ls, ns)
	startWorkers(t, ls, ns, worker.Config{Name: "p0", Role: engine.WorkerPrefill,
		Args: []byte(`{"speedup_ratio": 1, "kv_transfer_abort_timeout_ms": 50}`), MaxRooms: 1})
	d := newCoupledDriver(t, ls, ns, router)
	var rooms []*plane.WireRoom
	var ended []uint64
	wait := func(turn uint64) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case f := <-d.frames:
				require.Nil(t, f.Refused)
				for _, it := range f.Items {
					if it.Room != nil {
						rooms = append(rooms, it.Room)
					}
					if it.Output != nil {
						for _, ev := range it.Output.Events {
							if ev.Kind == engine.EventHoldReleased {
								ended = append(ended, ev.RequestID)
							}
						}
					}
				}
				if f.Turn >= turn && f.Seq > 0 {
					return
				}
			case <-deadline:
				t.Fatalf("no answer to turn %d", turn)
			}
		}
	}
	prompt := make([]uint32, 40)
	d.session = 41
	d.send(plane.Command{Op: plane.OpHello, Coupled: true, Turn: 1})
	wait(1)
	// Request 1's hold ends at its deadline before its room is asked for.
	d.send(plane.Command{Op: plane.OpSubmit, Turn: 2, ID: 1, Tokens: prompt, MaxTokens: 3, Hold: true})
	d.send(plane.Command{Op: plane.OpRun, Until: 1000, Turn: 3})
	wait(3)
	require.Equal(t, []uint64{1}, ended, "request 1's hold aborted")
	d.send(plane.Command{Op: plane.OpOpenRoom, At: 1000, Turn: 4, TID: 1, ID: 1})
	wait(4)
	// Request 2's room is open while it holds, and closes at its deadline.
	d.send(plane.Command{Op: plane.OpSubmit, At: 1000, Turn: 5, ID: 2, Tokens: prompt, MaxTokens: 3, Hold: true})
	d.send(plane.Command{Op: plane.OpOpenRoom, At: 1000, Turn: 6, TID: 2, ID: 2})
	wait(6)
	d.send(plane.Command{Op: plane.OpRun, Until: 2000, Turn: 7})
	wait(7)
	require.Equal(t, []uint64{1, 2}, ended, "request 2's hold aborted")
	d.send(plane.Command{Op: plane.OpOpenRoom, At: 2000, Turn: 8, TID: 3, ID: 3})
	wait(8)
	require.Len(t, rooms, 3)
	for i, r := range rooms {
		assert.Empty(t, r.Err, "room %d opens: the one before it was closed", i+1)
	}
	d.send(plane.Command{Op: plane.OpBye})
}
