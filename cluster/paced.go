package cluster

import (
	"context"
	"time"

	"github.com/kvstrand/mocker/internal/timescale"
)

// A paced cluster (New) runs its loop on a goroutine of its own, against
// the wall clock: it processes the events of modeled time t once the wall
// clock reaches t / speedup_ratio (see loop.go), and callers that loop may
// hold modeled time still while they act on a result (GenerateThenPause).

// pacedDriver is what a paced cluster holds beside the loop's core: the
// pacer that ties its modeled time to the wall clock, and the callers'
// pauses. A cluster on virtual time has none.
type pacedDriver struct {
	scale timescale.Scale
	pacer *timescale.Pacer
	// Pauses keep modeled time still for callers that got a result and
	// have not acted on it yet (GenerateThenPause).
	pauses map[uint64]struct{}
	seq    uint64
	touch  time.Time // wall time of the last pause taken or ended
	lost   uint64    // pauses that ran out (maxPause)
	// maxPause is pauseMax; tests of what a pause does (not of its
	// running out) set it longer than a starved host ever stalls.
	maxPause time.Duration
}

// PaceSlack is the pacing grain of a paced cluster: how far ahead of the
// wall clock its loop may process events rather than sleep until each
// one's instant. A timer wake-up per event would cost more CPU than the
// events themselves, and running up to a couple of milliseconds early
// changes no modeled result (events run in modeled order either way; an
// arrival is never stamped before the loop's now). What a client measures
// of a paced run is the model's within it.
const PaceSlack = 2 * time.Millisecond

// newPacedDriver paces modeled time at scale from start on.
func newPacedDriver(scale timescale.Scale, start time.Time) *pacedDriver {
	return &pacedDriver{scale: scale, pacer: timescale.NewPacerAt(start, PaceSlack), maxPause: pauseMax}
}

// Pause is a stop of a paced cluster's modeled time, for a closed-loop
// caller between a result and its next step (GenerateThenPause): not a KV
// hold, which is a prefill's KV kept for its decode. The zero Pause stops
// nothing.
type Pause struct{ id uint64 }

// pauseMax bounds how long (wall time) pauses may keep a paced loop still
// without one being taken or ended: a caller that computes for longer
// than that, or forgets its pause, lets modeled time go on.
const pauseMax = 100 * time.Millisecond

// GenerateThenPause is Generate for a caller that loops: it sends its next
// request as soon as it has acted on the last result. The request ends
// prev as it arrives, and the result comes with a new pause: until the
// caller resumes (Resume, or its next GenerateThenPause), the paced loop
// does not move modeled time past the instant the result was ready (for
// at most pauseMax of wall time without news of any pause). The caller's
// own think time, however long the host takes over it, is then no modeled
// time, as on the virtual clock: the next request arrives at the instant
// the last one ended. On a virtual or stepped cluster it is Generate (the
// zero Pause).
func (c *Cluster) GenerateThenPause(ctx context.Context, req Request, prev Pause) (Result, Pause) {
	if c.paced == nil || c.remote != nil {
		// Remote workers keep their own clocks: nothing here to pause.
		c.Resume(prev)
		return c.Generate(ctx, req), Pause{}
	}
	if err := req.validate(); err != nil {
		c.Resume(prev)
		return Result{Outcome: OutcomeError, Error: err.Error()}, Pause{}
	}
	h := &call{req: req, reply: make(chan Result, 1), wantPause: true}
	if !c.send(arriveMsg{h: h, resume: prev.id}) {
		return Result{Outcome: OutcomeError, Error: errClosed}, Pause{}
	}
	res := c.await(ctx, h)
	return res, Pause{id: h.pause}
}

// Resume lets modeled time go on past p (no-op for the zero Pause or a
// pause already ended or run out).
func (c *Cluster) Resume(p Pause) {
	if p.id == 0 || c.stepped != nil {
		return
	}
	c.send(resumeMsg(p))
}

// take starts a pause at the loop's now.
func (d *pacedDriver) take() uint64 {
	if d.pauses == nil {
		d.pauses = map[uint64]struct{}{}
	}
	d.seq++
	d.pauses[d.seq] = struct{}{}
	d.touch = time.Now()
	return d.seq
}

// end ends a pause (none on a cluster that is not paced).
func (d *pacedDriver) end(id uint64) {
	if d == nil {
		return
	}
	if _, ok := d.pauses[id]; ok {
		delete(d.pauses, id)
		d.touch = time.Now()
	}
}

// paused reports whether pauses keep modeled time still now; pauses with
// no news for maxPause run out.
func (d *pacedDriver) paused() bool {
	if len(d.pauses) == 0 {
		return false
	}
	if time.Since(d.touch) > d.maxPause {
		d.lost += uint64(len(d.pauses))
		clear(d.pauses)
		return false
	}
	return true
}

// wallModeled is the modeled time the wall clock has reached.
func (d *pacedDriver) wallModeled() float64 { return d.scale.Modeled(d.pacer.Elapsed()) }

// LagReport says how far the paced loop fell behind the wall clock over
// the cluster's life so far.
type LagReport struct {
	// PeakMs is the most wall time the loop ran behind; NowMs now.
	PeakMs, NowMs float64
	// RunMs is the wall time since the cluster started.
	RunMs float64
}

// Excessive reports whether the lag is worth a warning: it peaked above a
// tenth of the run, so the script's wall-clock pacing offered noticeably
// less modeled load than it says.
func (l LagReport) Excessive() bool { return l.RunMs > 0 && l.PeakMs > 0.1*l.RunMs }

// Lag reports the loop's lag (zero for a virtual cluster).
func (c *Cluster) Lag() LagReport {
	now, peak := c.ClockLag()
	return NewLagReport(now, peak, time.Since(c.started))
}

// NewLagReport is the report of a clock that runs now behind the wall
// clock, at most peak, over run of wall time.
func NewLagReport(now, peak, run time.Duration) LagReport {
	return LagReport{PeakMs: ms(peak), NowMs: ms(now), RunMs: ms(run)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ClockLag reports how far behind the wall clock the cluster's loop is now
// and the most it ever was: when the host cannot keep up with the modeled
// load at this speedup_ratio, the whole cluster runs late together (no
// modeled result changes), and the script's wall-clock pacing then offers
// less modeled load than it says. Zero for a virtual cluster.
func (c *Cluster) ClockLag() (now, peak time.Duration) {
	if c.paced == nil {
		return 0, 0
	}
	return c.paced.pacer.Lag()
}
