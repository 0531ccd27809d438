package harness

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// paced runs a script on the paced clock (mocker run's default).
func paced(c *Config) { c.Clock = ClockPaced }

// turnLog runs a small program of tasks that sleep, wait on gates and
// read the clock, and returns what each saw, in the order they saw it.
func turnLog(c *VirtualClock) []string {
	var mu sync.Mutex
	var log []string
	note := func(format string, args ...any) {
		mu.Lock()
		log = append(log, fmt.Sprintf("%s %s", c.Elapsed(), fmt.Sprintf(format, args...)))
		mu.Unlock()
	}
	ts := newTasks(c)
	g := c.NewGate()
	for i := range 4 {
		ts.Go(func() {
			for k := range 3 {
				c.Sleep(context.Background(), time.Duration((i*7+k*3)%5+1)*time.Millisecond)
				note("task %d step %d", i, k)
			}
			if i == 0 {
				g.Open()
			}
		})
	}
	ts.Go(func() {
		g.Wait(context.Background())
		note("gate")
		c.AfterFunc(4*time.Millisecond, func() { note("timer") })
		c.Sleep(context.Background(), 5*time.Millisecond)
		note("after timer")
	})
	ts.Wait()
	return log
}

func TestPacedClock_SameTurnsAsVirtualAtTheWallClocksPace(t *testing.T) {
	t.Parallel()
	want := turnLog(NewVirtualClock(time.Time{}))
	for range 3 {
		c := NewPacedClock(time.Time{})
		c.SetPaceSlack(time.Millisecond)
		start := time.Now()
		got := turnLog(c)
		wall := time.Since(start)
		assert.Equal(t, want, got, "a paced clock takes the virtual clock's turns")
		// The clock never runs ahead of the wall clock by more than its
		// slack: a lower bound on wall time, which a busy host only raises.
		assert.GreaterOrEqual(t, wall, c.Elapsed()-time.Millisecond)
	}
	require.NotEmpty(t, want)
}

func TestPacedClock_SleepTakesWallTime(t *testing.T) {
	t.Parallel()
	c := NewPacedClock(time.Time{})
	c.SetPaceSlack(5 * time.Millisecond)
	c.SetPaceSlack(time.Second) // only ever closer
	start := time.Now()
	for range 3 {
		require.True(t, c.Sleep(context.Background(), 40*time.Millisecond))
	}
	assert.Equal(t, 120*time.Millisecond, c.Elapsed(), "time moves by exactly what was slept")
	assert.GreaterOrEqual(t, time.Since(start), 115*time.Millisecond)
	assert.WithinDuration(t, c.WallStart(), c.Now().Add(-c.Elapsed()), 0, "the epoch is the wall time at the start")
}

// TestPacedClock_CatchUpWaitsForTheWallClock: within its slack a paced
// clock runs ahead of the wall clock rather than wake up for every
// instant; CatchUp waits until the wall clock has caught up, so that a run
// ends no sooner than its script says.
func TestPacedClock_CatchUpWaitsForTheWallClock(t *testing.T) {
	t.Parallel()
	c := NewPacedClock(time.Time{})
	for range 4 {
		require.True(t, c.Sleep(context.Background(), 50*time.Millisecond))
	}
	c.CatchUp(context.Background())
	assert.GreaterOrEqual(t, time.Since(c.WallStart()), c.Elapsed())
	c.Done()

	v := NewVirtualClock(time.Time{})
	require.True(t, v.Sleep(context.Background(), time.Hour))
	v.CatchUp(context.Background()) // an unpaced clock never waits
	v.Done()
}

// TestPacedClock_GateOpenedFromOutsideWakesAtTheWallClocksTime: a reply
// from another process readies its waiter at the wall clock's time, not
// at the next timer's, and timers still fire at their instants.
func TestPacedClock_GateOpenedFromOutsideWakesAtTheWallClocksTime(t *testing.T) {
	t.Parallel()
	for _, timer := range []bool{false, true} {
		c := NewPacedClock(time.Time{})
		var fired time.Duration
		if timer {
			c.AfterFunc(time.Second, func() { fired = c.Elapsed() })
		}
		g := c.NewGate()
		go func() {
			time.Sleep(30 * time.Millisecond)
			g.Open()
		}()
		require.True(t, g.Wait(context.Background()))
		woke := c.Elapsed()
		assert.GreaterOrEqual(t, woke, 30*time.Millisecond, "timer %v", timer)
		if timer {
			assert.Less(t, woke, time.Second, "woken before the timer's instant")
			require.True(t, c.Sleep(context.Background(), 2*time.Second-woke))
			assert.Equal(t, time.Second, fired, "the timer fired at its instant")
		}
		c.Done()
	}
}

// TestPacedClock_LagWhenTheHostFallsBehind: a task that holds its turn for
// 60 ms of wall time (a host too slow for the script) puts the clock
// behind the wall clock; the clock says by how much and does not skip an
// instant to catch up.
func TestPacedClock_LagWhenTheHostFallsBehind(t *testing.T) {
	t.Parallel()
	c := NewPacedClock(time.Time{})
	time.Sleep(60 * time.Millisecond)
	require.True(t, c.Sleep(context.Background(), time.Millisecond))
	assert.Equal(t, time.Millisecond, c.Elapsed())
	now, peak := c.Lag()
	assert.GreaterOrEqual(t, now, 50*time.Millisecond)
	assert.GreaterOrEqual(t, peak, now)
	c.Done()

	_, none := NewVirtualClock(time.Time{}).Lag()
	assert.Zero(t, none, "an unpaced clock has no lag")
}

func TestPaced_SameSummaryAsVirtual(t *testing.T) {
	t.Parallel()
	v := runScript(t, mixedScenarios, virtual)
	require.NoError(t, v.err, v.stderr)
	start := time.Now()
	p := runScript(t, mixedScenarios, paced)
	require.NoError(t, p.err, p.stderr)
	assert.GreaterOrEqual(t, time.Since(start), 5*time.Second-paceSlack, "paced: the 5 s scenarios take at least 5 s")
	assert.Equal(t, string(v.export), string(p.export), "byte for byte")
}

// TestConfig_ZeroClockIsPaced runs a Config that says nothing about its
// clock: it must run on the paced clock, whose results do not depend on
// the host (iterations that sleep 50 ms take exactly 50 ms of script time),
// and take the wall time its script says (a virtual clock would not).
func TestConfig_ZeroClockIsPaced(t *testing.T) {
	t.Parallel()
	start := time.Now()
	res := runScript(t, `
import { sleep } from 'k6';
export const options = { iterations: 2 };
export default function () { sleep(0.05); }
`, func(c *Config) { c.Clock = Config{}.Clock })
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, ClockPaced, Config{}.Clock)
	assert.Equal(t, 50.0, res.metric(t, "iteration_duration", "max"), "script time, not the host's")
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "paced: two 50 ms iterations take 100 ms of wall time")
}

func TestConfig_UnknownClockIsAnInvalidConfig(t *testing.T) {
	t.Parallel()
	res := runScript(t, `export default function () {}`, func(c *Config) { c.Clock = ClockMode(7) })
	assert.Equal(t, ExitInvalidConfig, ExitCode(res.err))
	assert.ErrorContains(t, res.err, "Config.Clock: want ClockPaced, ClockVirtual, ClockWall or ClockAuto, got 7")
	assert.Equal(t, "ClockMode(7)", ClockMode(7).String())
	assert.Equal(t, []string{"paced", "virtual", "wall", "auto"}, []string{ClockPaced.String(), ClockVirtual.String(), ClockWall.String(), ClockAuto.String()})
}

// TestPacedClock_SlackFollowsTheDisplay: a paced run runs ahead of the
// wall clock by at most one redraw of a display on a terminal, by a
// second when it writes progress lines less often, and by five seconds
// when it shows nothing (quiet); a plugin's closer slack still wins.
func TestPacedClock_SlackFollowsTheDisplay(t *testing.T) {
	slack := func(c *VirtualClock) time.Duration { return c.pace.Slack() }
	for _, tc := range []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"terminal display", Config{StderrTTY: true}, paceSlack},
		{"quiet on a terminal", Config{StderrTTY: true, Quiet: true}, quietPaceSlack},
		{"quiet, progress lines", Config{Quiet: true}, quietPaceSlack},
		{"quiet, lines every 100 ms", Config{Quiet: true, ProgressInterval: 100 * time.Millisecond}, quietPaceSlack},
		{"progress lines", Config{}, undisplayedPaceSlack},
		{"lines every 100 ms", Config{ProgressInterval: 100 * time.Millisecond}, paceSlack},
		{"terminal redrawn every 2 s", Config{StderrTTY: true, ProgressInterval: 2 * time.Second}, undisplayedPaceSlack},
	} {
		c := tc.cfg.pacedClock()
		assert.Equal(t, tc.want, slack(c), tc.name)
		c.SetPaceSlack(time.Millisecond)
		assert.Equal(t, time.Millisecond, slack(c), "%s: a plugin's closer slack", tc.name)
		c.Done()
	}
}
