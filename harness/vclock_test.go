package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// virtual runs a script on the virtual clock.
func virtual(c *Config) { c.Clock = ClockVirtual }

func TestVirtualClock_TimersFireInTimeThenCreationOrder(t *testing.T) {
	t.Parallel()
	c := NewVirtualClock(time.Time{})
	var got []string
	c.AfterFunc(2*time.Second, func() { got = append(got, "b@2s") })
	c.AfterFunc(time.Second, func() { got = append(got, "a@1s") })
	c.AfterFunc(2*time.Second, func() { got = append(got, "c@2s") })
	stop := c.AfterFunc(1500*time.Millisecond, func() { got = append(got, "stopped") })
	assert.True(t, stop())
	assert.False(t, stop(), "a stopped timer cannot be stopped twice")
	require.True(t, c.Sleep(context.Background(), 3*time.Second))
	assert.Equal(t, []string{"a@1s", "b@2s", "c@2s"}, got)
	assert.Equal(t, 3*time.Second, c.Elapsed())
	assert.Equal(t, DefaultVirtualEpoch.Add(3*time.Second), c.Now())
}

func TestVirtualClock_TasksTakeTurnsInWakeOrder(t *testing.T) {
	t.Parallel()
	// Ten tasks sleep different amounts; however the Go scheduler runs
	// them, each wakes alone, in the order of its deadline, at its instant.
	for range 20 {
		c := NewVirtualClock(time.Time{})
		var mu sync.Mutex
		var order []int
		var at []time.Duration
		ts := newTasks(c)
		for i := range 10 {
			ts.Go(func() {
				c.Sleep(context.Background(), time.Duration(10-i)*time.Millisecond)
				mu.Lock()
				order = append(order, i)
				at = append(at, c.Elapsed())
				mu.Unlock()
			})
		}
		ts.Wait()
		assert.Equal(t, []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, order)
		for k, d := range at {
			assert.Equal(t, time.Duration(k+1)*time.Millisecond, d)
		}
	}
}

func TestVirtualClock_CancelledWaitersWakeBeforeTimeMoves(t *testing.T) {
	t.Parallel()
	c := NewVirtualClock(time.Time{})
	ctx, cancel := c.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var woke time.Duration
	ts := newTasks(c)
	ts.Go(func() {
		assert.False(t, c.NewGate().Wait(ctx), "the gate never opens; the context ends")
		woke = c.Elapsed()
	})
	ts.Go(func() { c.Sleep(context.Background(), time.Hour) })
	ts.Wait()
	assert.Equal(t, time.Second, woke, "woken at the deadline, not when the other task's hour ended")
	assert.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
}

// TestVirtualClock_EndedWaitersWakeInParkOrder: waiters whose context
// ends wake at that instant in the order they parked, however the Go
// scheduler runs them, after one opened from among them left earlier; a
// waiter on a context that never ends is left to its gate, and no parked
// gate is left behind for the sweeps.
func TestVirtualClock_EndedWaitersWakeInParkOrder(t *testing.T) {
	t.Parallel()
	for range 10 {
		c := NewVirtualClock(time.Time{})
		ctx, cancel := c.WithTimeout(context.Background(), time.Second)
		other, cancelOther := context.WithCancel(context.Background())
		early, never := c.NewGate(), c.NewGate()
		c.AfterFunc(500*time.Millisecond, early.Open)
		c.AfterFunc(2*time.Second, never.Open)
		var mu sync.Mutex
		var order []string
		note := func(s string) {
			mu.Lock()
			order = append(order, s)
			mu.Unlock()
		}
		ts := newTasks(c)
		for i := range 6 {
			ts.Go(func() {
				switch i {
				case 2: // opened while the others wait
					assert.True(t, early.Wait(other))
					note(fmt.Sprintf("early@%v", c.Elapsed()))
				case 5:
					assert.True(t, never.Wait(context.Background()))
					note(fmt.Sprintf("never@%v", c.Elapsed()))
				default:
					assert.False(t, c.NewGate().Wait(ctx))
					note(fmt.Sprintf("%d@%v", i, c.Elapsed()))
				}
			})
		}
		ts.Wait()
		cancel()
		cancelOther()
		assert.Equal(t, []string{"early@500ms", "0@1s", "1@1s", "3@1s", "4@1s", "never@2s"}, order)
		c.mu.Lock()
		assert.Empty(t, c.parked)
		c.mu.Unlock()
	}
}

func TestVirtualClock_ParticipantsSettleEachInstant(t *testing.T) {
	t.Parallel()
	c := NewVirtualClock(time.Time{})
	p := &fakeParticipant{c: c, events: []time.Duration{3 * time.Millisecond, 7 * time.Millisecond}}
	c.Join(p)
	g := c.NewGate()
	p.wake = g
	require.True(t, g.Wait(context.Background()), "the participant's first event opens the gate")
	assert.Equal(t, 3*time.Millisecond, c.Elapsed())
	require.True(t, g.Wait(context.Background()))
	assert.Equal(t, 7*time.Millisecond, c.Elapsed())
	assert.Equal(t, []time.Duration{0, 3 * time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond}, p.settled[:4])
}

// TestVirtualClock_ParticipantsJoinAndLeaveBetweenSteps: a participant
// that joins settles from the next step on, and one that left settles no
// more (nor do its events move the clock).
func TestVirtualClock_ParticipantsJoinAndLeaveBetweenSteps(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	c := NewVirtualClock(time.Time{})
	g := c.NewGate()
	c.AfterFunc(10*ms, g.Open) // a backstop, should the steps miss a participant
	a := &fakeParticipant{c: c, wake: g, events: []time.Duration{2 * ms, 4 * ms, 6 * ms}}
	leaveA := c.Join(a)
	require.True(t, g.Wait(context.Background()))
	assert.Equal(t, 2*ms, c.Elapsed())
	b := &fakeParticipant{c: c, wake: g, events: []time.Duration{5 * ms}}
	c.Join(b)
	require.True(t, g.Wait(context.Background()))
	assert.Equal(t, 4*ms, c.Elapsed())
	leaveA()
	settledA := len(a.settled)
	require.True(t, g.Wait(context.Background()))
	assert.Equal(t, 5*ms, c.Elapsed(), "b's event, not a's")
	assert.Len(t, a.settled, settledA, "a left")
	assert.Equal(t, []time.Duration{2 * ms, 4 * ms, 4 * ms, 5 * ms}, b.settled)
}

type fakeParticipant struct {
	c       *VirtualClock
	events  []time.Duration
	settled []time.Duration
	wake    Gate
}

func (p *fakeParticipant) Settle(now time.Duration) {
	p.settled = append(p.settled, now)
	for len(p.events) > 0 && p.events[0] <= now {
		p.events = p.events[1:]
		p.wake.Open()
	}
}

func (p *fakeParticipant) Next() (time.Duration, bool) {
	if len(p.events) == 0 {
		return 0, false
	}
	return p.events[0], true
}

// TestVirtual_ExecutorsRunExactlyTheDocumentedIterations: on the virtual
// clock an executor does exactly what k6's documentation says it plans,
// with no timing tolerance.
func TestVirtual_ExecutorsRunExactlyTheDocumentedIterations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, scenario, sleep string
		want                  float64
	}{
		{"constant-arrival-rate: rate × duration", `{ executor: 'constant-arrival-rate', rate: 10, timeUnit: '1s', duration: '10s', preAllocatedVUs: 5 }`, "0.3", 100},
		{"ramping-arrival-rate: the area under the rate", `{ executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s', preAllocatedVUs: 10, stages: [{ duration: '10s', target: 10 }] }`, "0.2", 50},
		{"constant-vus: duration / iteration time per VU", `{ executor: 'constant-vus', vus: 3, duration: '10s' }`, "1", 30},
		{"per-vu-iterations", `{ executor: 'per-vu-iterations', vus: 4, iterations: 5 }`, "0.5", 20},
		{"shared-iterations", `{ executor: 'shared-iterations', vus: 3, iterations: 7 }`, "0.5", 7},
		// Slot i joins when the target passes i (2.5 s, 5 s, 7.5 s; the
		// fourth at the very end): 8 + 5 + 3 one-second iterations.
		{"ramping-vus", `{ executor: 'ramping-vus', startVUs: 0, stages: [{ duration: '10s', target: 4 }] }`, "1", 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runScript(t, `
import { sleep } from 'k6';
export const options = { scenarios: { s: `+tc.scenario+` } };
export default function () { sleep(`+tc.sleep+`); }
`, virtual)
			require.NoError(t, res.err, res.stderr)
			assert.Equal(t, tc.want, res.metric(t, "iterations", "count"))
			assert.Zero(t, res.metricOrZero(t, "dropped_iterations", "count"))
		})
	}
}

func TestVirtual_TimeIsTheClocksEverywhere(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
import { sleep, group } from 'k6';
import exec from 'k6/execution';
export const options = { vus: 2, iterations: 4 };
export function setup() {
  if (Date.now() !== Date.parse('2026-01-01T00:00:00Z')) throw new Error('Date.now() is ' + new Date().toISOString());
}
export default function () {
  const t0 = Date.now();
  group('g', () => sleep(1.25));
  if (Date.now() - t0 !== 1250) throw new Error('slept ' + (Date.now() - t0));
}
`, virtual)
	require.NoError(t, res.err, res.stderr)
	assert.NotContains(t, res.stderr, "Error")
	assert.Equal(t, 1250.0, res.metric(t, "iteration_duration", "min"))
	assert.Equal(t, 1250.0, res.metric(t, "iteration_duration", "max"))
	assert.Equal(t, 1250.0, res.metric(t, "group_duration", "max"))
}

func TestVirtual_EpochAndSeedAreTheRunsToChoose(t *testing.T) {
	t.Parallel()
	src := `
import { sleep } from 'k6';
export const options = { iterations: 3, vus: 3, randomSeed: 42 };
export default function () { console.log('R' + __VU + '=' + Math.random() + ' T=' + Date.now()); sleep(0.1); }
`
	epoch := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	a := runScript(t, src, func(c *Config) { virtual(c); c.VirtualEpoch = epoch })
	b := runScript(t, src, func(c *Config) { virtual(c); c.VirtualEpoch = epoch })
	require.NoError(t, a.err, a.stderr)
	assert.Contains(t, a.stderr, fmt.Sprintf("T=%d", epoch.UnixMilli()))
	assert.Equal(t, withoutWallTime(a.stderr), withoutWallTime(b.stderr), "the same seed gives the same numbers")
	c := runScript(t, strings.Replace(src, "randomSeed: 42", "randomSeed: 43", 1), virtual)
	assert.NotEqual(t, valueAfter(lineWith(a.stderr, "R1=")), valueAfter(lineWith(c.stderr, "R1=")), "another seed, other numbers")
}

// withoutWallTime drops the closing "virtual clock: ran … of wall time"
// line, the one line of a virtual run that depends on the host.
func withoutWallTime(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "virtual clock: ran ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, sub); i >= 0 {
			return l[i:]
		}
	}
	return ""
}

func valueAfter(s string) string {
	_, v, _ := strings.Cut(s, "=")
	v, _, _ = strings.Cut(v, " ")
	return v
}

// TestVirtual_SameScriptSameSummaryByte: shared iterations taken by
// whichever VU is free, random think times, an arrival-rate scenario that
// runs short of VUs, thresholds — the summary export is byte-identical
// from run to run.
// mixedScenarios shares iterations among VUs, runs an arrival-rate
// scenario short of VUs and ramps VUs, with random think times and
// thresholds: every way the order of turns could show in a summary.
const mixedScenarios = `
import { sleep, check } from 'k6';
import exec from 'k6/execution';
import { Trend } from 'k6/metrics';
const who = new Trend('who');
export const options = {
  scenarios: {
    shared: { executor: 'shared-iterations', vus: 5, iterations: 40 },
    open: { executor: 'constant-arrival-rate', rate: 30, timeUnit: '1s', duration: '5s', preAllocatedVUs: 3, maxVUs: 4, exec: 'open' },
    ramp: { executor: 'ramping-vus', stages: [{ duration: '3s', target: 6 }, { duration: '2s', target: 0 }], exec: 'open' },
  },
  thresholds: { iterations: ['count>10'] },
};
export default function () {
  who.add(exec.vu.idInTest * 1000 + exec.scenario.iterationInTest);
  sleep(Math.random() / 3);
}
export function open() { check(Math.random(), { small: (r) => r < 0.5 }); sleep(Math.random()); }
`

func TestVirtual_SameScriptSameSummaryByte(t *testing.T) {
	t.Parallel()
	first := runScript(t, mixedScenarios, virtual)
	require.NoError(t, first.err, first.stderr)
	for range 3 {
		again := runScript(t, mixedScenarios, virtual)
		require.NoError(t, again.err, again.stderr)
		assert.Equal(t, string(first.export), string(again.export))
	}
}

// TestVirtual_IterationsThatNeverWaitStillLetTimeMove: a default function
// that never sleeps takes no virtual time; rather than spin at one instant
// for ever, the next iteration starts a microsecond later (never throttled
// to the instants something else happens at), and the run says so.
func TestVirtual_IterationsThatNeverWaitStillLetTimeMove(t *testing.T) {
	t.Parallel()
	looping := runScript(t, `
export const options = { vus: 2, duration: '10ms' };
export default function () {}
`, virtual)
	require.NoError(t, looping.err, looping.stderr)
	assert.Contains(t, looping.stderr, "took no script time")
	assert.Equal(t, 20_000.0, looping.metric(t, "iterations", "count"), "one per VU per microsecond of the 10 ms")

	shared := runScript(t, `
export const options = { scenarios: { s: { executor: 'shared-iterations', vus: 2, iterations: 20000, maxDuration: '5m' } } };
export default function () {}
`, virtual)
	require.NoError(t, shared.err, shared.stderr)
	assert.Equal(t, 20_000.0, shared.metric(t, "iterations", "count"), "every iteration runs: none is dropped at maxDuration")
	assert.Zero(t, shared.metricOrZero(t, "dropped_iterations", "count"))

	paced := runScript(t, `
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 10, timeUnit: '1s', duration: '2s', preAllocatedVUs: 1 } } };
export default function () {}
`, virtual)
	require.NoError(t, paced.err, paced.stderr)
	assert.Equal(t, 20.0, paced.metric(t, "iterations", "count"))
	assert.Zero(t, paced.metricOrZero(t, "dropped_iterations", "count"), "the VU is back in the pool by the next start")
}

// TestVirtual_MinIterationDuration: k6's minIterationDuration makes every
// iteration last at least that long, here on the virtual clock exactly.
func TestVirtual_MinIterationDuration(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { vus: 2, duration: '10s', minIterationDuration: '500ms' };
export default function () {}
`, virtual)
	require.NoError(t, res.err, res.stderr)
	assert.Equal(t, 40.0, res.metric(t, "iterations", "count"))
	assert.Equal(t, 500.0, res.metric(t, "iteration_duration", "min"))
	assert.NotContains(t, res.stderr, "took no script time")
}
