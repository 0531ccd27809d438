package harness

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock is a run's time source: what time it is, how to be woken once a
// duration has passed, and how to wait for something that needs time to
// pass. Everything in a run that reads or waits on time goes through it —
// executors, sleep(), Date, timers, metric timestamps, and plugins (VU.Clock)
// — so that a virtual clock (`mocker run --clock virtual`) can replace the
// wall clock without anything else changing.
//
// Under a virtual clock, time advances only when every VU and every timed
// participant is blocked on the clock: in Sleep, in a Gate's Wait, or on a
// participant's next event. A plugin that makes a VU wait for a result must
// therefore wait on a Gate (not on a channel of its own) and have whatever
// produces the result Open it.
type Clock interface {
	// Now returns the clock's current time.
	Now() time.Time
	// AfterFunc calls f once d has passed on the clock. stop cancels the
	// call and reports whether it did (false when f has already been
	// started or stopped). On the wall clock f runs on its own goroutine;
	// on a virtual clock it runs while time stands at its instant, before
	// anything woken then goes on, and must not block.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
	// Sleep blocks the caller until d has passed on the clock or ctx ends;
	// it reports whether the whole of d passed.
	Sleep(ctx context.Context, d time.Duration) bool
	// WithTimeout is context.WithTimeout on the clock: the context is
	// cancelled once d has passed, with context.DeadlineExceeded as its
	// cause (context.Cause).
	WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// NewGate returns a gate a goroutine can wait on while time passes.
	NewGate() Gate
	// Virtual reports whether the clock is virtual.
	Virtual() bool
	// Join makes p a timed participant of the clock: under a virtual clock,
	// time never passes p's next event without p settling it first. leave
	// ends the participation. On the wall clock Join does nothing.
	Join(p Participant) (leave func())
}

// Gate is a binary semaphore that knows the clock: Open lets one Wait
// through (an Open with no waiter is kept for the next Wait). A goroutine
// waiting on a gate counts as blocked, so a virtual clock may advance.
type Gate interface {
	// Wait blocks until the gate is opened or ctx ends (a nil ctx never
	// ends); it reports whether the gate was opened.
	Wait(ctx context.Context) bool
	// Open lets the current or next Wait through; safe from any goroutine.
	Open()
}

// Participant is something with its own events in time that VUs wait on,
// such as a simulated cluster: the clock asks it for its next event and
// lets it settle each instant before time moves on. Times are offsets from
// the clock's start.
type Participant interface {
	// Settle processes what was handed to the participant up to now (in a
	// fixed order, never in goroutine order) and its own events due by
	// now, opening the gates of those waiting on them. It runs while every
	// VU is blocked and time stands still; it may block on work that
	// takes no clock time (a socket reply).
	Settle(now time.Duration)
	// Next is the offset of the participant's next own event, and false
	// when it has none.
	Next() (time.Duration, bool)
}

// RunTime is what a run's own clock — a virtual clock, or a paced one
// (`mocker run --clock virtual`, the default paced clock) — offers a
// plugin beyond Clock: the run's time since it began, and how it keeps to
// the wall clock. A plugin with a simulation of its own joins the clock as
// a Participant and reads these to relate its time to the run's. The wall
// clock is not a RunTime.
type RunTime interface {
	Clock
	// Elapsed is the clock's time since the run began.
	Elapsed() time.Duration
	// Paced reports whether the clock waits for the wall clock.
	Paced() bool
	// WallStart is the wall time a paced clock started at (zero when it
	// is not paced).
	WallStart() time.Time
	// Lag is how far behind the wall clock a paced clock is now and the
	// most it has been (zero when it is not paced).
	Lag() (now, peak time.Duration)
	// SetPaceSlack narrows how far ahead of the wall clock a paced clock
	// may run, for a plugin whose work reaches other processes that read
	// the wall clock.
	SetPaceSlack(d time.Duration)
	// Activity moves whenever something in the run may have ended a
	// context: a participant that watches its callers' contexts needs to
	// look again only when it moved.
	Activity() uint64
}

var _ RunTime = (*VirtualClock)(nil)

// WallClock is the Clock of real time.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (WallClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Sleep waits on a timer.
func (WallClock) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx == nil || ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done(ctx):
		return false
	}
}

// WithTimeout is context.WithTimeout.
func (WallClock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, d)
}

// NewGate returns a channel-backed gate.
func (WallClock) NewGate() Gate { return make(chanGate, 1) }

// Virtual is false.
func (WallClock) Virtual() bool { return false }

// Join does nothing: on the wall clock participants keep their own time.
func (WallClock) Join(Participant) func() { return func() {} }

type chanGate chan struct{}

func (g chanGate) Wait(ctx context.Context) bool {
	select {
	case <-g:
		return true
	case <-done(ctx):
		return false
	}
}

func (g chanGate) Open() {
	select {
	case g <- struct{}{}:
	default:
	}
}

// done is ctx.Done(), or nil (never ready) for a nil ctx.
func done(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}

// runClock is what the runner needs of a clock beyond Clock: goroutines it
// counts as participants (a virtual clock may not advance while one of
// them runs) and a way to tell it a context was cancelled.
type runClock interface {
	Clock
	// goTask runs f on a new goroutine that counts as running until f
	// returns or blocks on the clock.
	goTask(f func())
	// cancelled tells the clock that contexts may have been cancelled, so
	// that those waiting on them wake before time moves on.
	cancelled()
	// endedOutside tells the clock that the run's context ended from
	// outside the run (a signal, Run's caller): contexts under it end
	// on other goroutines, at no instant of the clock.
	endedOutside()
	// yield lets time move on before the caller goes on: on a virtual
	// clock it waits for the next instant at which anything happens (a
	// task that never waits on the clock would otherwise hold time still
	// for ever); on the wall clock time moves anyway.
	yield(ctx context.Context)
}

func (WallClock) goTask(f func())       { go f() }
func (WallClock) cancelled()            {}
func (WallClock) endedOutside()         {}
func (WallClock) yield(context.Context) {}

// tasks is a sync.WaitGroup whose goroutines are clock tasks and whose
// Wait lets a virtual clock advance.
type tasks struct {
	c    runClock
	mu   sync.Mutex
	n    int
	gate Gate
}

func newTasks(c runClock) *tasks { return &tasks{c: c, gate: c.NewGate()} }

// Go runs f as a task.
func (ts *tasks) Go(f func()) {
	ts.mu.Lock()
	ts.n++
	ts.mu.Unlock()
	ts.c.goTask(func() {
		defer func() {
			ts.mu.Lock()
			ts.n--
			last := ts.n == 0
			ts.mu.Unlock()
			if last {
				ts.gate.Open()
			}
		}()
		f()
	})
}

// Wait blocks until every task has returned.
func (ts *tasks) Wait() {
	for {
		ts.mu.Lock()
		n := ts.n
		ts.mu.Unlock()
		if n == 0 {
			return
		}
		ts.gate.Wait(context.Background())
	}
}

// ClockMode is what time a run's script runs on (Config.Clock, `mocker run
// --clock`).
type ClockMode int

const (
	// ClockPaced, the zero value and the command's default, runs the
	// script on a virtual clock kept from running ahead of the wall clock
	// (NewPacedClock): the run takes the wall time its script says, and
	// its results are those of ClockVirtual on any host, however busy.
	ClockPaced ClockMode = iota
	// ClockVirtual runs the script on a virtual clock that advances only
	// when every VU and participant is blocked (NewVirtualClock): as fast
	// as the CPU allows, with results that do not depend on the host.
	ClockVirtual
	// ClockWall runs the script on the host's clock, every VU free on its
	// own goroutine: what it measures then varies with the host's load.
	// The distributed transport needs a paced or wall clock.
	ClockWall
	// ClockAuto, the command's default, runs a script that imports a
	// module keeping modeled time of its own (a TimeKeeper, such as
	// k6/x/mocker) on ClockPaced, and any other script on ClockWall,
	// where the time JavaScript takes counts as it does in k6.
	ClockAuto
)

// String is the mode's name on the command line.
func (m ClockMode) String() string {
	switch m {
	case ClockPaced:
		return "paced"
	case ClockVirtual:
		return "virtual"
	case ClockWall:
		return "wall"
	case ClockAuto:
		return "auto"
	}
	return fmt.Sprintf("ClockMode(%d)", int(m))
}
