package timescale

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestScale_SpeedupZeroOrLessMeansOne(t *testing.T) {
	for _, s := range []Scale{{}, New(0), New(-3), New(math.NaN())} {
		assert.Equal(t, 1.0, s.Ratio())
		assert.Equal(t, 250.0, s.Modeled(250*time.Millisecond))
		assert.Equal(t, 250*time.Millisecond, s.Script(250))
	}
	assert.Equal(t, 20.0, New(20).Ratio())
}

func TestScale_ModeledIsScriptTimesSpeedup(t *testing.T) {
	s := New(20)
	assert.Equal(t, 20_000.0, s.Modeled(time.Second))
	assert.Equal(t, 50*time.Millisecond, s.Script(1000))
}

// A script instant found for a modeled instant never falls short of it,
// and is the earliest whole nanosecond that does not: a wait until it
// always reaches its event, and no later than it must.
func TestScale_ScriptInstantReachesItsModeledInstant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(rapid.Float64Range(1e-3, 1e6).Draw(t, "speedup"))
		ms := rapid.Float64Range(0, 1e9).Draw(t, "ms")
		at := s.Script(ms)
		// Float rounding in the way back may lose an ulp or two; the
		// rounding up covers it by a whole nanosecond's worth.
		back := s.Modeled(at)
		if back < ms && ms-back > 1e-9*math.Max(1, ms) {
			t.Fatalf("Script(%v) = %v, back to %v: short of the event", ms, at, back)
		}
		if at > 0 && s.Modeled(at-2) > ms*(1+1e-12) {
			t.Fatalf("Script(%v) = %v is later than it must be", ms, at)
		}
	})
}

func TestPacer_UntilWaitsForAnInstantPastTheSlack(t *testing.T) {
	p := NewPacer(time.Millisecond)
	d := p.Until(time.Hour)
	assert.Greater(t, d, 59*time.Minute, "an instant an hour ahead waits about an hour")
	assert.LessOrEqual(t, d, time.Hour)
	now, peak := p.Lag()
	assert.Zero(t, now)
	assert.Zero(t, peak)
}

func TestPacer_UntilMeasuresLagOfAnInstantAlreadyPassed(t *testing.T) {
	p := NewPacer(0)
	p.start = time.Now().Add(-time.Hour) // the schedule started an hour ago
	assert.LessOrEqual(t, p.Until(time.Minute), time.Duration(0))
	now, peak := p.Lag()
	assert.GreaterOrEqual(t, now, 59*time.Minute)
	assert.Equal(t, now, peak)

	// Caught up: the lag now is zero, the peak stays.
	assert.Greater(t, p.Until(2*time.Hour), time.Duration(0))
	now, peak2 := p.Lag()
	assert.Zero(t, now)
	assert.Equal(t, peak, peak2)
}

func TestPacer_InstantsWithinTheSlackAreDue(t *testing.T) {
	p := NewPacer(time.Hour)
	assert.LessOrEqual(t, p.Until(30*time.Minute), time.Duration(0), "within the slack: due now")
	now, _ := p.Lag()
	assert.Zero(t, now, "running early is no lag")
	p.Tighten(time.Millisecond)
	assert.Greater(t, p.Until(30*time.Minute), time.Duration(0), "past the tightened slack: wait")
	p.Tighten(time.Hour)
	assert.Equal(t, time.Millisecond, p.Slack(), "Tighten never widens")
}

func TestPacer_BehindKeepsThePeak(t *testing.T) {
	p := NewPacer(0)
	p.Behind(3 * time.Second)
	p.Behind(time.Second)
	now, peak := p.Lag()
	assert.Equal(t, time.Second, now)
	assert.Equal(t, 3*time.Second, peak)
}

func TestPacer_CatchUpEndsWithItsContext(t *testing.T) {
	p := NewPacer(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { p.CatchUp(ctx, time.Hour); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		require.Fail(t, "CatchUp ignored its cancelled context")
	}
	p.CatchUp(context.Background(), 0) // an instant passed: returns at once
}
