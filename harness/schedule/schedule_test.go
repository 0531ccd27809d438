package schedule

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/harness/options"
)

func TestRampingTarget_InterpolatesBetweenStages(t *testing.T) {
	t.Parallel()
	stages := []options.Stage{{Duration: 100 * time.Millisecond, Target: 10}, {Duration: 0, Target: 3}, {Duration: 100 * time.Millisecond, Target: 0}}
	tests := []struct {
		at   time.Duration
		want int64
	}{
		{0, 0}, {50 * time.Millisecond, 5}, {99 * time.Millisecond, 9},
		{100 * time.Millisecond, 3}, {150 * time.Millisecond, 2}, {250 * time.Millisecond, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.at), func(t *testing.T) {
			assert.Equal(t, tc.want, RampingTarget(0, stages, tc.at))
		})
	}
}

func TestArrivals_CountsMatchTheRateIntegral(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sc   options.Scenario
		want int
	}{
		{"constant", options.Scenario{Executor: options.ExecConstantArrival, Rate: 10, TimeUnit: time.Second, Duration: 2 * time.Second}, 20},
		{"constant per minute", options.Scenario{Executor: options.ExecConstantArrival, Rate: 120, TimeUnit: time.Minute, Duration: 3 * time.Second}, 6},
		{"constant, period not a whole number of ns", options.Scenario{Executor: options.ExecConstantArrival, Rate: 3, TimeUnit: time.Second, Duration: time.Second}, 3},
		{"constant 7 per 3s", options.Scenario{Executor: options.ExecConstantArrival, Rate: 7, TimeUnit: 3 * time.Second, Duration: 3 * time.Second}, 7},
		{"ramp up", options.Scenario{Executor: options.ExecRampingArrivalRate, StartRate: 0, TimeUnit: time.Second,
			Stages: []options.Stage{{Duration: 2 * time.Second, Target: 10}}}, 10},
		{"ramp down then hold", options.Scenario{Executor: options.ExecRampingArrivalRate, StartRate: 20, TimeUnit: time.Second,
			Stages: []options.Stage{{Duration: time.Second, Target: 0}, {Duration: time.Second, Target: 0}, {Duration: time.Second, Target: 5}}}, 13},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewArrivals(&tc.sc)
			n := 0
			var prev time.Duration
			for {
				off, ok := s.Next()
				if !ok {
					break
				}
				require.GreaterOrEqual(t, off, prev, "start times must not go backwards")
				require.Less(t, off, tc.sc.TotalDuration())
				prev = off
				n++
			}
			if tc.sc.Executor == options.ExecConstantArrival {
				assert.Equal(t, tc.want, n, "a constant rate plans exactly rate × duration / timeUnit starts")
				return
			}
			assert.InDelta(t, tc.want, n, 1)
		})
	}
}

func genStages(t *rapid.T) []options.Stage {
	n := rapid.IntRange(1, 5).Draw(t, "stages")
	out := make([]options.Stage, n)
	for i := range out {
		out[i] = options.Stage{
			Duration: time.Duration(rapid.Int64Range(0, 5000).Draw(t, "ms")) * time.Millisecond,
			Target:   rapid.Int64Range(0, 200).Draw(t, "target"),
		}
	}
	return out
}

// TestRampingTarget_StaysBetweenTheStagesTargets: interpolation never
// overshoots, and once the stages are over the last target holds.
func TestRampingTarget_StaysBetweenTheStagesTargets(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(0, 200).Draw(t, "start")
		stages := genStages(t)
		lo, hi, total := start, start, time.Duration(0)
		for _, st := range stages {
			lo, hi, total = min(lo, st.Target), max(hi, st.Target), total+st.Duration
		}
		at := time.Duration(rapid.Int64Range(0, int64(total)+1).Draw(t, "at"))
		got := RampingTarget(start, stages, at)
		if got < lo || got > hi {
			t.Fatalf("target %d at %s outside [%d, %d]", got, at, lo, hi)
		}
		if end := RampingTarget(start, stages, total); end != stages[len(stages)-1].Target {
			t.Fatalf("target %d at the end, want the last stage's %d", end, stages[len(stages)-1].Target)
		}
	})
}

// TestArrivals_StartsAreOrderedWithinThePlanAndMatchTheIntegral: whatever
// the stages, starts never go backwards, all fall inside the planned
// duration, and their number is the integral of the rate, give or take one.
func TestArrivals_StartsAreOrderedWithinThePlanAndMatchTheIntegral(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		unit := time.Duration(rapid.SampledFrom([]int64{1, 10, 60, 1000}).Draw(t, "unit")) * time.Second / 10
		sc := &options.Scenario{Executor: options.ExecRampingArrivalRate, TimeUnit: unit,
			StartRate: rapid.Int64Range(0, 200).Draw(t, "startRate"), Stages: genStages(t)}
		want, from := 0.0, float64(sc.StartRate)
		for _, st := range sc.Stages {
			want += (from + float64(st.Target)) / 2 * st.Duration.Seconds() / unit.Seconds()
			from = float64(st.Target)
		}
		a := NewArrivals(sc)
		n, prev := 0, time.Duration(0)
		for off, ok := a.Next(); ok; off, ok = a.Next() {
			if off < prev || off >= sc.TotalDuration() {
				t.Fatalf("start %d at %s after %s, plan lasts %s", n, off, prev, sc.TotalDuration())
			}
			prev = off
			n++
		}
		if math.Abs(float64(n)-want) > 1 {
			t.Fatalf("%d starts, the rate's integral is %.3f", n, want)
		}
	})
}
