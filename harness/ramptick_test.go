package harness

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/harness/options"
	"github.com/kvstrand/mocker/harness/schedule"
)

// TestNextRampChange_SameTargetsAsEveryTick: a ramping-vus controller that
// sleeps to nextRampChange applies the same targets, at the same ticks, as
// one that reads the target at every tick, for any stages.
func TestNextRampChange_SameTargetsAsEveryTick(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sc := &options.Scenario{StartVUs: rapid.Int64Range(0, 40).Draw(t, "start")}
		var total time.Duration
		for i := range rapid.IntRange(1, 5).Draw(t, "stages") {
			d := time.Duration(rapid.Int64Range(0, 30_000).Draw(t, "ms"+string(rune('a'+i)))) * time.Millisecond
			sc.Stages = append(sc.Stages, options.Stage{Duration: d, Target: rapid.Int64Range(0, 40).Draw(t, "target"+string(rune('a'+i)))})
			total += d
		}
		s := &scenarioRun{cfg: sc}
		end := total + 20*time.Second // past the stages: the target stays put
		type change struct {
			at     time.Duration
			target int64
		}
		var every, jumped []change
		applied := schedule.RampingTarget(sc.StartVUs, sc.Stages, 0)
		for at := rampTick; at <= end; at += rampTick {
			if tg := schedule.RampingTarget(sc.StartVUs, sc.Stages, at); tg != applied {
				every = append(every, change{at, tg})
				applied = tg
			}
		}
		applied = schedule.RampingTarget(sc.StartVUs, sc.Stages, 0)
		for at := time.Duration(0); ; {
			d := s.nextRampChange(at, applied)
			if d <= 0 || d%rampTick != 0 || d > maxRampSleep*rampTick {
				t.Fatalf("at %v: slept %v, want a whole number of ticks in [1, %d]", at, d, maxRampSleep)
			}
			if at += d; at > end {
				break
			}
			if tg := schedule.RampingTarget(sc.StartVUs, sc.Stages, at); tg != applied {
				jumped = append(jumped, change{at, tg})
				applied = tg
			}
		}
		if len(every) != len(jumped) {
			t.Fatalf("every tick: %d changes %v; sleeping to the next change: %d %v", len(every), every, len(jumped), jumped)
		}
		for i := range every {
			if every[i] != jumped[i] {
				t.Fatalf("change %d: every tick %+v, sleeping to the next change %+v", i, every[i], jumped[i])
			}
		}
	})
}
