// Package timescale owns the one relation between mocker's two kinds of
// time, and the one way a schedule is held back to the wall clock.
//
// Modeled time is the engine's timeline: float64 milliseconds, in which
// every latency a user reads (TTFT, hold durations, transfer times) is
// measured. Script time is the time a load script, a progress display or a
// network client sees: a time.Duration since the start of a run, which is
// the wall clock's on a paced or live run and a virtual clock's otherwise.
// The two are related by one factor, speedup_ratio: modeled = script ×
// speedup. A Scale holds that factor and is the only place the conversion
// is written, with one rounding rule (see Scale.Script).
//
// A Pacer turns a schedule of instants on script time into waits on the
// wall clock: an event is due once the wall clock has reached its instant
// (less a slack that batches near instants into one wake-up), and when the
// host cannot keep up the Pacer measures how far behind it runs. Every
// live path paces through one: the harness's paced clock, the cluster's
// loop, the distributed worker and the HTTP server.
package timescale

import (
	"math"
	"time"
)

// Scale converts between modeled milliseconds and script time at one
// speedup_ratio. The zero Scale runs at speedup 1.
type Scale struct {
	speedup float64
}

// New returns the scale of speedup_ratio speedup: modeled time runs
// speedup times faster than script time. A speedup of zero or less means
// no scaling (1), the rule engine args have always followed for an unset
// speedup_ratio.
func New(speedup float64) Scale {
	if speedup <= 0 || math.IsNaN(speedup) {
		speedup = 1
	}
	return Scale{speedup: speedup}
}

// Ratio is the scale's speedup_ratio (1 for the zero Scale).
func (s Scale) Ratio() float64 {
	if s.speedup == 0 {
		return 1
	}
	return s.speedup
}

// Modeled is the modeled time, in milliseconds, that script time d spans.
func (s Scale) Modeled(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) * s.Ratio()
}

// Script is the script time at which modeled time ms is reached, rounded
// up to a whole nanosecond: converted back with Modeled, an instant found
// this way is never short of ms, so a wait on script time until Script(ms)
// always reaches the modeled event it waits for. (Rounding down would leave
// a waiter a fraction of a nanosecond before its event, to wake again.)
func (s Scale) Script(ms float64) time.Duration {
	return time.Duration(math.Ceil(ms / s.Ratio() * float64(time.Millisecond)))
}
