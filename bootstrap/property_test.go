package bootstrap

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestServer_RoomStateMachineMatchesModel runs random Open / Complete /
// Abort / clock steps against a plain model of the room rules and checks
// every returned error and the occupancy after each step.
func TestServer_RoomStateMachineMatchesModel(t *testing.T) {
	t.Parallel()
	const (
		maxRooms     = 3
		completedTTL = 5 * time.Second
		abortedTTL   = 30 * time.Second
	)
	type modelRoom struct {
		state   roomState
		expires time.Time
	}
	rapid.Check(t, func(t *rapid.T) {
		clock := newFakeClock()
		s, err := Listen(Config{MaxRooms: maxRooms, CompletedTTL: completedTTL, AbortedTTL: abortedTTL, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		model := map[uint64]modelRoom{}
		live := func(id uint64) (modelRoom, bool) {
			r, ok := model[id]
			if ok && r.state != roomOpen && !clock.Now().Before(r.expires) {
				delete(model, id)
				return modelRoom{}, false
			}
			return r, ok
		}
		expect := func(op string, id uint64, got, want error) {
			if want == nil && got != nil || want != nil && !errors.Is(got, want) {
				t.Fatalf("%s(%d): got error %v, want %v", op, id, got, want)
			}
		}
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			id := rapid.Uint64Range(1, 6).Draw(t, "id")
			var want error
			switch op := rapid.SampledFrom([]string{"open", "complete", "abort", "advance"}).Draw(t, "op"); op {
			case "advance":
				clock.Advance(time.Duration(rapid.IntRange(0, 12).Draw(t, "seconds")) * time.Second)
				continue
			case "open":
				open := 0
				for k := range model {
					if r, ok := live(k); ok && r.state == roomOpen {
						open++
					}
				}
				if _, ok := live(id); ok {
					want = ErrRoomExists
				} else if open >= maxRooms {
					want = ErrRoomsFull
				} else {
					model[id] = modelRoom{state: roomOpen}
				}
				expect(op, id, s.Open(id), want)
			case "complete", "abort":
				to, ttl, other := roomCompleted, completedTTL, roomAborted
				call := s.Complete
				if op == "abort" {
					to, ttl, other, call = roomAborted, abortedTTL, roomCompleted, s.Abort
				}
				r, ok := live(id)
				switch {
				case !ok && op == "complete":
					want = ErrUnknownTransfer
				case !ok || r.state == roomOpen:
					model[id] = modelRoom{state: to, expires: clock.Now().Add(ttl)}
				case r.state == other:
					want = ErrAlreadyResolved
				}
				expect(op, id, call(id), want)
			}
			var open, tomb int
			for k := range model {
				if r, ok := live(k); ok {
					if r.state == roomOpen {
						open++
					} else {
						tomb++
					}
				}
			}
			if got := s.Stats(); got != (Stats{OpenRooms: open, Tombstones: tomb}) {
				t.Fatalf("step %d: stats %+v, model has %d open and %d tombstones", step, got, open, tomb)
			}
		}
	})
}
