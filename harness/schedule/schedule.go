package schedule

import (
	"math"
	"time"

	"github.com/kvstrand/mocker/harness/options"
)

// RampingTarget is the VU count (or rate) the stages ask for at elapsed,
// interpolated linearly from start and truncated towards the previous
// value.
func RampingTarget(start int64, stages []options.Stage, elapsed time.Duration) int64 {
	from := start
	for _, st := range stages {
		if elapsed < st.Duration {
			frac := float64(elapsed) / float64(st.Duration)
			return from + int64(float64(st.Target-from)*frac)
		}
		elapsed -= st.Duration
		from = st.Target
	}
	return from
}

// Arrivals yields iteration start offsets for the arrival-rate executors:
// iteration k starts when the integral of the rate reaches k.
type Arrivals struct {
	unit   time.Duration
	stages []options.Stage
	// constant rate
	rate  int64 // constant-arrival-rate: starts per unit
	total time.Duration

	k         int64
	stageIdx  int
	stageFrom float64 // rate per second at the stage start
	stageT0   float64 // seconds
	stageN0   float64 // iterations started before the stage
	exhausted bool
}

// NewArrivals plans the starts of a constant-arrival-rate or
// ramping-arrival-rate scenario.
func NewArrivals(sc *options.Scenario) *Arrivals {
	a := &Arrivals{unit: sc.TimeUnit, total: sc.TotalDuration()}
	if sc.Executor == options.ExecConstantArrival {
		a.rate = sc.Rate
		return a
	}
	a.stages = sc.Stages
	a.stageFrom = a.perSecond(sc.StartRate)
	return a
}

func (a *Arrivals) perSecond(r int64) float64 { return float64(r) / a.unit.Seconds() }

// Next returns the start offset of the next iteration, from the scenario's
// start, or false when the plan has no more starts before its end.
func (a *Arrivals) Next() (time.Duration, bool) {
	if a.rate > 0 {
		// k·unit/rate, not k·(unit/rate): a period rounded to whole
		// nanoseconds would fit an extra start before the end (3/s over
		// 1s would start a 4th iteration at 999,999,999 ns).
		off := time.Duration(float64(a.k) * float64(a.unit) / float64(a.rate))
		if off >= a.total {
			return 0, false
		}
		a.k++
		return off, true
	}
	target := float64(a.k)
	for !a.exhausted && a.stageIdx < len(a.stages) {
		st := a.stages[a.stageIdx]
		d := st.Duration.Seconds()
		r0, r1 := a.stageFrom, a.perSecond(st.Target)
		x := target - a.stageN0
		if d > 0 {
			acc := (r1 - r0) / (2 * d)
			disc := r0*r0 + 4*acc*x
			if disc >= 0 {
				den := r0 + math.Sqrt(disc)
				tau := 0.0
				if den > 0 {
					tau = 2 * x / den
				} else if x > 0 {
					tau = math.Inf(1)
				}
				// a start exactly on the boundary belongs to the next stage
				if tau < d-1e-9 {
					tau = max(tau, 0)
					a.k++
					return time.Duration((a.stageT0 + tau) * float64(time.Second)), true
				}
			}
			a.stageN0 += (r0 + r1) / 2 * d
		}
		a.stageT0 += d
		a.stageFrom = r1
		a.stageIdx++
	}
	a.exhausted = true
	return 0, false
}
