package harness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// holdAt is a participant whose Settle blocks once, at instant at, until
// released: what happens meanwhile from outside the run is done before
// the clock moves on, at a known instant.
type holdAt struct {
	at       time.Duration
	held     bool
	reached  chan struct{}
	released chan struct{}
}

func (p *holdAt) Settle(now time.Duration) {
	if !p.held && now >= p.at {
		p.held = true
		close(p.reached)
		<-p.released
	}
}

func (p *holdAt) Next() (time.Duration, bool) { return p.at, !p.held }

// longStop is how a long request's context ends in stoppedLong.
type longStop int

const (
	byTask    longStop = iota // a task cancels it, woken by another request's result
	byTimer                   // a WithTimeout of the clock ends it
	byOutside                 // the run's context is cancelled from another goroutine
)

// stoppedLong runs a request far longer than the test on a stepped
// cluster, ends its context as how says, and returns its result and the
// clock's time when it came. hook: the cluster skips its look for ended
// contexts while the clock's Activity stands still.
func stoppedLong(t *testing.T, how longStop, hook bool) (cluster.Result, time.Duration) {
	t.Helper()
	c := NewVirtualClock(time.Time{})
	cl, err := cluster.NewStepped(cluster.Config{Engine: "vllm", Workers: 1, Seed: 1},
		func() cluster.Gate { return c.NewGate() })
	require.NoError(t, err)
	if hook {
		cl.SetActivity(c.Activity)
	}
	leave := c.Join(cl.ClockParticipant())
	defer leave()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := newTasks(c)
	switch how {
	case byTask:
		ts.Go(func() {
			g := c.NewGate()
			cl.Submit(context.Background(), cluster.Request{PromptTokens: 64, MaxTokens: 3}, cluster.Key{Source: 2},
				func(cluster.Result) { g.Open() })
			g.Wait(context.Background())
			cancel() // no cancelled(): nothing waits on ctx
		})
	case byTimer:
		var stop context.CancelFunc
		ctx, stop = c.WithTimeout(ctx, 50*time.Millisecond)
		defer stop()
	case byOutside:
		// As the runner watches the run's context (testRun.watch).
		seen := make(chan struct{})
		defer context.AfterFunc(ctx, func() {
			c.endedOutside()
			close(seen)
		})()
		hold := &holdAt{at: 30 * time.Millisecond, reached: make(chan struct{}), released: make(chan struct{})}
		defer c.Join(hold)()
		go func() {
			<-hold.reached
			cancel()
			<-seen
			close(hold.released)
		}()
	}
	var (
		res cluster.Result
		at  time.Duration
	)
	ts.Go(func() {
		g := c.NewGate()
		cl.Submit(ctx, cluster.Request{PromptTokens: 64, MaxTokens: 100_000}, cluster.Key{Source: 1},
			func(r cluster.Result) {
				res, at = r, c.Elapsed()
				g.Open()
			})
		g.Wait(context.Background())
	})
	ts.Wait()
	require.NoError(t, cl.Close())
	return res, at
}

// TestActivity_StopsLandWhereLookingEveryStepPutsThem: a request whose
// context ends is stopped at the same instant, with the same result,
// whether the cluster looks for ended contexts at every step or only
// when the clock's Activity moved: it moves when the turn goes to a
// task, when a timer fires and when the run is stopped from outside.
func TestActivity_StopsLandWhereLookingEveryStepPutsThem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		how  longStop
	}{{"task", byTask}, {"timer", byTimer}, {"outside", byOutside}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, wantAt := stoppedLong(t, tc.how, false)
			require.Equal(t, cluster.OutcomeError, want.Outcome, "the request is stopped: %+v", want)
			require.Less(t, want.OutputTokens, 1000)
			if tc.how == byTimer {
				// Stopped at the deadline; the result comes once the
				// engine has let the sequence go, at its next step.
				assert.GreaterOrEqual(t, wantAt, 50*time.Millisecond)
				assert.Less(t, wantAt, 100*time.Millisecond)
			}
			got, gotAt := stoppedLong(t, tc.how, true)
			assert.Equal(t, want, got)
			assert.Equal(t, wantAt, gotAt)
		})
	}
}

// TestActivity_MovesAtEveryStepOnceStoppedFromOutside: while tasks wait
// and only a participant's events move the clock, Activity stands
// still; once the run's context ended from outside (whose descendants
// may end later, on another goroutine), it moves at every step.
func TestActivity_MovesAtEveryStepOnceStoppedFromOutside(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, outside := range []bool{false, true} {
		c := NewVirtualClock(time.Time{})
		if outside {
			c.endedOutside()
		}
		g := c.NewGate()
		p := &activityParticipant{fakeParticipant: fakeParticipant{c: c, wake: g, events: []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms}}}
		c.Join(p)
		// Each event opens the gate once; between two, nothing but the
		// participant moves the clock.
		for range 4 {
			require.True(t, g.Wait(context.Background()))
		}
		require.GreaterOrEqual(t, len(p.seen), 4)
		distinct := map[uint64]bool{}
		for _, a := range p.seen {
			distinct[a] = true
		}
		if outside {
			assert.Len(t, distinct, len(p.seen), "a new count at every step: %v", p.seen)
		} else {
			assert.Less(t, len(distinct), len(p.seen), "steps with no task run move nothing: %v", p.seen)
		}
	}
}

// activityParticipant notes the clock's Activity at every Settle.
type activityParticipant struct {
	fakeParticipant
	seen []uint64
}

func (p *activityParticipant) Settle(now time.Duration) {
	p.seen = append(p.seen, p.c.Activity())
	p.fakeParticipant.Settle(now)
}
