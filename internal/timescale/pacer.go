package timescale

import (
	"context"
	"sync/atomic"
	"time"
)

// Pacer holds a schedule on script time back to the wall clock: an
// instant is due once the wall time since the pacer started has reached
// it, less the slack. When the schedule's instants come due after the wall
// clock already passed them, the host is behind, and the pacer records by
// how much (Lag): a paced run whose host cannot keep up falls behind as a
// whole, never changing a modeled result, and says so.
//
// A Pacer only decides; the loop that owns it does the waiting, on its own
// timer and whatever else it selects on (a mailbox, a poke). Its methods
// are safe for concurrent use: Lag is read by displays while a loop paces.
type Pacer struct {
	start time.Time
	slack atomic.Int64 // ns
	lag   atomic.Int64 // ns behind now
	peak  atomic.Int64 // ns behind at most
}

// NewPacer returns a pacer started now that treats instants within slack
// of the wall clock as due: a timer wake-up per instant costs more CPU
// than the work at the instant, and running a little early changes
// nothing that the schedule's own clock lets anyone see.
func NewPacer(slack time.Duration) *Pacer { return NewPacerAt(time.Now(), slack) }

// NewPacerAt is NewPacer for a schedule whose instant zero is start: one
// that other processes share (a distributed cluster's workers take their
// clocks from the instant the cluster started).
func NewPacerAt(start time.Time, slack time.Duration) *Pacer {
	p := &Pacer{start: start}
	p.slack.Store(int64(max(slack, 0)))
	return p
}

// Start is the wall time the pacer started at.
func (p *Pacer) Start() time.Time { return p.start }

// Elapsed is the wall time since the pacer started.
func (p *Pacer) Elapsed() time.Duration { return time.Since(p.start) }

// Slack is how far ahead of the wall clock an instant counts as due.
func (p *Pacer) Slack() time.Duration { return time.Duration(p.slack.Load()) }

// Tighten narrows the slack to d when d is closer than it was (a run
// whose work reaches other processes, which read the wall clock, wants a
// close one); it never widens it.
func (p *Pacer) Tighten(d time.Duration) {
	for {
		old := p.slack.Load()
		if d < 0 || int64(d) >= old || p.slack.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// Until says how long to wait before the instant at (script time since the
// pacer's start) is due: zero or less means due now. A due instant that the
// wall clock had already passed counts as lag; an instant still ahead
// means the schedule has caught up. The wait, when positive, runs to the
// instant itself, not to its slack edge, so a loop that waits the whole of
// it wakes on time.
func (p *Pacer) Until(at time.Duration) time.Duration {
	wall := time.Since(p.start)
	if d := at - wall; d > p.Slack() {
		p.lag.Store(0)
		return d
	}
	p.observe(max(wall-at, 0))
	return 0
}

// Behind records that the schedule now runs d behind the wall clock, for a
// loop that found out without asking Until (an input that arrives from
// outside the schedule is stamped at the wall clock's time).
func (p *Pacer) Behind(d time.Duration) { p.observe(max(d, 0)) }

func (p *Pacer) observe(d time.Duration) {
	p.lag.Store(int64(d))
	for {
		peak := p.peak.Load()
		if int64(d) <= peak || p.peak.CompareAndSwap(peak, int64(d)) {
			return
		}
	}
}

// Lag is how far behind the wall clock the schedule runs now and the most
// it ever did.
func (p *Pacer) Lag() (now, peak time.Duration) {
	return time.Duration(p.lag.Load()), time.Duration(p.peak.Load())
}

// CatchUp waits until the wall clock reaches the script instant at, or ctx
// ends: a schedule may have run up to the slack ahead, and a run ends no
// sooner on the wall clock than its script says.
func (p *Pacer) CatchUp(ctx context.Context, at time.Duration) {
	d := at - time.Since(p.start)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
