package harness

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvstrand/mocker/internal/cputime"
	"github.com/kvstrand/mocker/internal/timescale"
)

// DefaultVirtualEpoch is the instant a virtual clock starts at unless the
// run says otherwise (--virtual-epoch): Date.now() in a script reads it at
// the start of the run, whatever day the run happens on.
var DefaultVirtualEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// VirtualClock is a clock on which time moves only when nothing in the run
// can move without it, the way testing/synctest's bubble works for Go
// tests but for a script run. Every VU and executor goroutine is a task of
// the clock, and the tasks take turns: one runs at a time, the others wait
// in Sleep, on a Gate, or in the queue of tasks ready to run. When the
// running task blocks, the next ready one runs; when none is ready, the
// clock lets its participants settle the present instant and, if that
// wakes nobody, jumps to the earliest pending timer or participant event.
//
// Taking turns makes a run a function of its script, options and seed
// alone: tasks wake in the order their timers, gates and participants'
// results say (never in the order the Go scheduler picks), so shared
// iterations, iteration numbers, Math.random streams, the order requests
// reach a cluster and the order samples are summed are the same on every
// run, on any host, however busy. A run is then as fast as one CPU allows.
//
// The zero value is not usable; see NewVirtualClock.
type VirtualClock struct {
	mu    sync.Mutex
	epoch time.Time
	now   time.Duration
	// nowAt is now for Now and Elapsed, which every sample and timestamp
	// reads: a load rather than a turn of the mutex. It changes only
	// with now, under mu.
	nowAt    atomic.Int64
	busy     bool            // a task (or the stepper) has the turn
	runq     []chan struct{} // tasks ready to run, in the order they woke
	stepping bool
	seq      uint64 // orders timers
	parkSeq  uint64 // orders parked gates
	timers   timerHeap
	parts    []*participant
	// stepParts is stepOnce's copy of parts, made when partsGen (bumped
	// as participants join and leave) moved past stepPartsGen.
	stepParts    []*participant
	partsGen     uint64
	stepPartsGen uint64
	// parked are the parked gates whose context can end, for
	// sweepLocked, in no order (each knows its index): one waiting on a
	// context that never ends (a VU in a blocking request waits on
	// Background) has nothing to sweep, and stays out.
	parked []*vgate
	// stalled is set while nothing runs and nothing is scheduled: only a
	// gate opened from outside the run (or a cancellation) moves it on.
	stalled bool
	// yielders wait for the clock's next instant (yield).
	yielders []*vgate
	// pace, when set, keeps the clock from running ahead of the wall
	// clock (NewPacedClock).
	pace *pacer
	// sleepers are Sleep's spent gates and timers, for the next Sleep:
	// a ramping-vus scenario sleeps every 10 ms of the clock, more often
	// than a request ends, and each fresh gate and timer was garbage.
	sleepers []*sleeper
	// sweepFn is sweep as a func value, made once: Wait hands it to
	// context.AfterFunc on every wait with a context.
	sweepFn func()
	// activity moves whenever something may have ended a context in the
	// run (see Activity).
	activity atomic.Uint64
	// outside is set once the run was stopped from outside (endedOutside):
	// from then on every step counts as activity.
	outside bool
	// handoffs counts the turns handed to tasks, for the watch on a task
	// that keeps its turn (watchStuck).
	handoffs uint64
}

// sleeper is one Sleep's gate and the timer that opens it, allocated
// together and reused (VirtualClock.sleepers).
type sleeper struct {
	g vgate
	t vtimer
}

// pacer holds a paced clock back to the wall clock (timescale.Pacer, on
// the clock's own time: a paced clock's script time is wall time) and
// lets a stepper waiting for it be woken.
type pacer struct {
	*timescale.Pacer
	// poke wakes a stepper waiting for the wall clock: a task was readied,
	// or a timer or participant joined, from outside the turn.
	poke    chan struct{}
	waiting bool // the stepper waits for the wall clock
}

// paceSlack is how far ahead of the wall clock a paced clock may run
// rather than wait: instants closer together than this are one wake-up.
// Nothing in the run can see the difference (every time it reads is the
// clock's), and each wake-up costs far more CPU than the modeled events
// it runs: on a shared 2-core VM, the quickstart took 0.41-0.49 s of CPU
// with 50 ms of slack and 0.30-0.36 s with 250 ms, against 0.19-0.26 s
// on a virtual clock. A quarter second is also how often the progress
// display redraws, so the display never shows the difference either, and
// the run ends no earlier than its script says (CatchUp). A run that talks
// to other processes, which see the wall clock, sets a closer slack
// (SetPaceSlack).
const paceSlack = 250 * time.Millisecond

// undisplayedPaceSlack is the slack of a run that redraws no display on a
// terminal but writes progress lines a second or more apart: each line
// then shows the time it is written at, within a second. A wake-up after a
// sleep finds the run's tables gone from the CPU caches, and a 32 s
// quickstart took 0.43 s of CPU with a quarter second of slack against
// 0.34-0.36 s with a second.
const undisplayedPaceSlack = time.Second

// quietPaceSlack is the slack of a quiet run, which shows nothing while it
// runs: only what it writes as it goes (-o json) is ahead of the wall
// clock, by at most this much, and a signal that stops it finds up to
// this much more of the run done. A minute of the quickstart took
// 0.20 s of CPU with it against 0.23-0.27 s with a second.
const quietPaceSlack = 5 * time.Second

// NewVirtualClock returns a virtual clock whose Now starts at epoch (the
// zero time means DefaultVirtualEpoch). The goroutine that creates it
// holds the first turn: time moves only once it blocks on the clock (or
// calls Done).
func NewVirtualClock(epoch time.Time) *VirtualClock {
	if epoch.IsZero() {
		epoch = DefaultVirtualEpoch
	}
	c := &VirtualClock{epoch: epoch, busy: true}
	c.sweepFn = c.sweep
	return c
}

// NewPacedClock returns a virtual clock that moves no faster than the wall
// clock: before time moves to an instant, the clock waits until that much
// wall time has passed since it was created. Everything else is as on a
// VirtualClock — the tasks take turns and wake in the same order, so a run
// on a paced clock gives the results of the same run on a virtual one,
// only at the wall clock's pace. When the host cannot keep up, the clock
// falls behind the wall clock (Lag) and the run's results do not change.
// A gate opened from outside the run (a reply from another process)
// readies its waiter at the clock's instant nearest the wall clock's.
// The zero epoch means the wall time now.
func NewPacedClock(epoch time.Time) *VirtualClock { return newPacedClock(epoch, paceSlack) }

// newPacedClock is NewPacedClock with the slack the run's display allows
// (paceSlack, undisplayedPaceSlack or quietPaceSlack).
func newPacedClock(epoch time.Time, slack time.Duration) *VirtualClock {
	p := &pacer{Pacer: timescale.NewPacer(slack), poke: make(chan struct{}, 1)}
	if epoch.IsZero() {
		epoch = p.Start()
	}
	c := NewVirtualClock(epoch)
	c.pace = p
	return c
}

// SetPaceSlack sets how far ahead of the wall clock a paced clock may run
// (see paceSlack) when d is closer than it was: a plugin whose VUs send
// work to other processes, which take its timing from the wall clock,
// asks for a close one. It does nothing on an unpaced clock.
func (c *VirtualClock) SetPaceSlack(d time.Duration) {
	if c.pace != nil {
		c.pace.Tighten(d)
	}
}

// CatchUp waits until the wall clock reaches the clock's time, or ctx
// ends: a paced clock may have run up to its slack ahead, and a run ends
// no sooner on the wall clock than its script says. It does nothing on an
// unpaced clock or one that is behind.
func (c *VirtualClock) CatchUp(ctx context.Context) {
	c.mu.Lock()
	p, now := c.pace, c.now
	c.mu.Unlock()
	if p != nil {
		p.CatchUp(ctx, now)
	}
}

// Paced reports whether the clock waits for the wall clock.
func (c *VirtualClock) Paced() bool { return c.pace != nil }

// Lag reports how far behind the wall clock a paced clock is now and the
// most it has been (zero for an unpaced clock).
func (c *VirtualClock) Lag() (now, peak time.Duration) {
	if c.pace == nil { // set for good when the clock is made
		return 0, 0
	}
	return c.pace.Lag()
}

// WallStart is the wall time a paced clock started at (zero when unpaced).
func (c *VirtualClock) WallStart() time.Time {
	if c.pace == nil {
		return time.Time{}
	}
	return c.pace.Start()
}

// Now returns the epoch plus the virtual time elapsed.
func (c *VirtualClock) Now() time.Time {
	return c.epoch.Add(c.Elapsed())
}

// Elapsed is the virtual time since the clock started.
func (c *VirtualClock) Elapsed() time.Duration {
	return time.Duration(c.nowAt.Load())
}

// Virtual is true.
func (c *VirtualClock) Virtual() bool { return true }

// Activity is a count that moves whenever code that may end a context has
// run on the clock: each time a task is handed the turn, each time a
// timer fires, and at every step once the run was stopped from outside
// (a signal, or the context of Run cancelled by its caller). Nothing else
// runs in the run: a participant's Settle ends no context. A participant
// that looks for ended contexts at every step can skip the look while
// Activity has not moved since its last one: no context can have ended
// meanwhile, so it still sees each end at the first step after it, as it
// would looking every time.
func (c *VirtualClock) Activity() uint64 { return c.activity.Load() }

// endedOutside is called once the run's own context ended from outside
// (a signal, its caller): the contexts under it end on whichever
// goroutine cancels them, at no instant of the clock and maybe after
// this runs, so every later step counts as activity (the run is ending:
// looking every time costs nothing worth saving). It also wakes the
// waiters whose context has ended and the stepper, as cancelled does.
func (c *VirtualClock) endedOutside() {
	c.mu.Lock()
	c.outside = true
	c.activity.Add(1)
	c.sweepLocked()
	c.pokeLocked()
	c.mu.Unlock()
}

// Done ends the creating goroutine's turn for good (see NewVirtualClock),
// for a caller that will not block on the clock itself.
func (c *VirtualClock) Done() { c.exitTask() }

type vtimer struct {
	at    time.Duration
	seq   uint64
	f     func()
	index int // in the heap; -1 once fired or stopped
}

type timerHeap []*vtimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*vtimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// AfterFunc schedules f at now+d; f runs on the goroutine stepping the
// clock, before anything it wakes goes on.
func (c *VirtualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.seq++
	t := &vtimer{at: c.now + max(d, 0), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	c.stalled = false
	c.pokeLocked()
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.index < 0 {
			return false
		}
		heap.Remove(&c.timers, t.index)
		return true
	}
}

// Sleep blocks until d has passed on the clock or ctx ends.
func (c *VirtualClock) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx == nil || ctx.Err() == nil
	}
	// What AfterFunc and NewGate would do, on a sleeper from the free
	// list. Once Wait returns the caller has the turn again, so the
	// stepper is not running the timer: it is still in the heap, or it
	// fired and its Open is over. The gate is then neither parked nor
	// holding a token (Wait took it), and the sleeper is free to reuse.
	c.mu.Lock()
	var s *sleeper
	if n := len(c.sleepers); n > 0 {
		s = c.sleepers[n-1]
		c.sleepers[n-1] = nil
		c.sleepers = c.sleepers[:n-1]
	} else {
		s = &sleeper{g: vgate{c: c, turn: make(chan struct{}, 1), keepWatch: true}}
		s.t.f = s.g.Open
	}
	c.seq++
	s.t.at, s.t.seq = c.now+d, c.seq
	heap.Push(&c.timers, &s.t)
	c.stalled = false
	c.pokeLocked()
	c.mu.Unlock()
	ok := s.g.Wait(ctx)
	c.mu.Lock()
	if s.t.index >= 0 {
		heap.Remove(&c.timers, s.t.index)
	}
	c.sleepers = append(c.sleepers, s)
	c.mu.Unlock()
	return ok
}

// WithTimeout returns a context cancelled once d has passed on the clock,
// with context.DeadlineExceeded as its cause.
func (c *VirtualClock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := c.AfterFunc(d, func() {
		cancel(context.DeadlineExceeded)
		c.sweep()
	})
	return ctx, func() {
		stop()
		cancel(context.Canceled)
		c.cancelled()
	}
}

// Join adds p to the participants; they settle in the order they joined.
func (c *VirtualClock) Join(p Participant) func() {
	c.mu.Lock()
	part := &participant{p: p}
	c.parts = append(c.parts, part)
	c.partsGen++
	c.stalled = false
	c.pokeLocked()
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, q := range c.parts {
			if q == part {
				c.parts = append(c.parts[:i], c.parts[i+1:]...)
				c.partsGen++
				return
			}
		}
	}
}

type participant struct{ p Participant }

// goTask starts f as a task; it runs when its turn comes.
func (c *VirtualClock) goTask(f func()) {
	turn := make(chan struct{}, 1)
	c.mu.Lock()
	c.readyLocked(turn)
	c.mu.Unlock()
	go func() {
		<-turn
		defer c.exitTask()
		f()
	}()
}

// exitTask ends the running task's turn for good.
func (c *VirtualClock) exitTask() {
	c.mu.Lock()
	c.busy = false
	c.dispatchLocked()
	c.mu.Unlock()
}

// readyLocked queues a task whose turn channel is turn, and hands it the
// turn if nothing runs.
func (c *VirtualClock) readyLocked(turn chan struct{}) {
	c.runq = append(c.runq, turn)
	if c.stalled && c.pace != nil {
		// Nothing was due: whatever readied the task came from outside the
		// run, at the wall clock's time.
		c.advanceLocked(max(c.now, c.pace.Elapsed()))
	}
	c.stalled = false
	c.pokeLocked()
	c.dispatchLocked()
}

// pokeLocked wakes a stepper waiting for the wall clock.
func (c *VirtualClock) pokeLocked() {
	if c.pace != nil && c.pace.waiting {
		select {
		case c.pace.poke <- struct{}{}:
		default:
		}
	}
}

// advanceLocked moves the clock's time to at (not before now) and wakes
// the tasks waiting for the next instant.
func (c *VirtualClock) advanceLocked(at time.Duration) {
	if at <= c.now {
		return
	}
	c.now = at
	c.nowAt.Store(int64(at))
	for _, g := range c.yielders {
		g.token = true
		if g.parked {
			c.wakeLocked(g)
		}
	}
	c.yielders = c.yielders[:0]
}

// paceLocked waits until the wall clock reaches next (less the slack) and
// reports true then. It reports false early when something changed from
// outside the run meanwhile — a task readied (the clock has then moved to
// the wall clock's time, short of next), a timer or participant added —
// for the stepper to look again. Called and returns with c.mu held.
func (c *VirtualClock) paceLocked(next time.Duration) bool {
	p := c.pace
	wait := p.Until(next)
	if wait <= 0 {
		return true
	}
	select { // a poke from before this wait is stale
	case <-p.poke:
	default:
	}
	p.waiting = true
	c.mu.Unlock()
	timer := time.NewTimer(wait)
	select {
	case <-timer.C:
	case <-p.poke:
	}
	timer.Stop()
	c.mu.Lock()
	p.waiting = false
	if len(c.runq) > 0 {
		c.advanceLocked(min(max(c.now, p.Elapsed()), next))
		return false
	}
	return p.Until(next) <= 0
}

// dispatchLocked gives the turn to the next ready task when nothing runs;
// when no task is ready it steps the clock until one is, or until nothing
// is left to happen. It runs on whichever goroutine ended a turn (before
// that goroutine blocks or exits) or readied a task while nothing ran.
func (c *VirtualClock) dispatchLocked() {
	if c.busy || c.stepping {
		return
	}
	for len(c.runq) == 0 && !c.stalled {
		c.stepping, c.busy = true, true
		moved := c.stepOnce()
		c.stepping, c.busy = false, false
		if !moved && len(c.runq) == 0 {
			c.stalled = true
		}
	}
	if len(c.runq) == 0 {
		return
	}
	// Shift the queue down rather than reslice past its head: it is a
	// few tasks long, and a queue that only ever moved forward in its
	// array had append reallocate it every few turns.
	next := c.runq[0]
	n := copy(c.runq, c.runq[1:])
	c.runq[n] = nil
	c.runq = c.runq[:n]
	c.busy = true
	c.handoffs++
	// The task may end a context before it blocks again.
	c.activity.Add(1)
	next <- struct{}{}
}

// yieldQuantum is how much clock time an iteration that took none is
// charged before the next one starts: time must move on for a VU that
// never waits (a duration-bound scenario would otherwise loop for ever at
// one instant), and a microsecond lets such a VU run a million iterations
// per second of clock time, as fast as the CPU allows, never throttled to
// the instants something else happens at.
const yieldQuantum = time.Microsecond

// yield waits for the next instant at which anything happens, at most
// yieldQuantum from now (see runClock).
func (c *VirtualClock) yield(ctx context.Context) {
	g := c.NewGate().(*vgate)
	c.mu.Lock()
	c.yielders = append(c.yielders, g)
	c.mu.Unlock()
	stop := c.AfterFunc(yieldQuantum, func() { c.nextInstant() })
	g.Wait(ctx)
	stop()
}

// nextInstant does nothing: a timer that runs it is an instant for the
// clock to move to, which wakes its yielders (advanceLocked).
func (c *VirtualClock) nextInstant() {}

// cancelled wakes the waiters whose context has ended.
func (c *VirtualClock) cancelled() { c.sweep() }

func (c *VirtualClock) sweep() {
	c.mu.Lock()
	c.sweepLocked()
	c.mu.Unlock()
}

// sweepLocked readies the parked waiters whose context has ended, in the
// order they parked.
func (c *VirtualClock) sweepLocked() {
	var ended []*vgate
	for _, g := range c.parked {
		if g.ctx.Err() != nil {
			ended = append(ended, g)
		}
	}
	slices.SortFunc(ended, func(a, b *vgate) int { return cmp.Compare(a.parkSeq, b.parkSeq) })
	for _, g := range ended {
		c.wakeLocked(g)
	}
}

// wakeLocked readies a parked waiter.
func (c *VirtualClock) wakeLocked(g *vgate) {
	if g.canEnd {
		// Swap the last gate into g's place.
		last := c.parked[len(c.parked)-1]
		c.parked[g.parkedAt], last.parkedAt = last, g.parkedAt
		c.parked[len(c.parked)-1] = nil
		c.parked = c.parked[:len(c.parked)-1]
		g.canEnd = false
	}
	g.parked = false
	c.readyLocked(g.turn)
}

// vgate is a Gate of a virtual clock.
type vgate struct {
	c      *VirtualClock
	token  bool
	parked bool
	// canEnd: parked on a context that can end, at c.parked[parkedAt].
	canEnd   bool
	parkedAt int
	parkSeq  uint64
	ctx      context.Context
	turn     chan struct{}
	// keepWatch is set on a sleeper's gate: its context watch (see Wait)
	// outlasts the wait, in watched and unwatch, for the next wait on
	// the same context. Reused gates only, so the watches stay few.
	keepWatch bool
	watched   context.Context
	unwatch   func() bool
}

// NewGate returns a gate on the clock.
func (c *VirtualClock) NewGate() Gate { return &vgate{c: c, turn: make(chan struct{}, 1)} }

func (g *vgate) Open() {
	c := g.c
	c.mu.Lock()
	g.token = true
	if g.parked {
		c.wakeLocked(g)
	}
	c.mu.Unlock()
}

// Wait ends the caller's turn until the gate opens (or ctx ends); the
// caller must be a task of the clock.
func (g *vgate) Wait(ctx context.Context) bool {
	c := g.c
	c.mu.Lock()
	if !g.token {
		if ctx != nil && ctx.Err() != nil {
			c.mu.Unlock()
			return false
		}
		canEnd := ctx != nil && ctx.Done() != nil // Background never ends
		c.parkSeq++
		g.parked, g.parkSeq, g.ctx, g.canEnd = true, c.parkSeq, ctx, canEnd
		if canEnd {
			g.parkedAt = len(c.parked)
			c.parked = append(c.parked, g)
		}
		c.busy = false
		c.dispatchLocked()
		c.mu.Unlock()
		// A context cancelled on the clock wakes its waiters at once (see
		// sweepLocked); one that ends on the wall clock (a signal, a
		// caller's deadline) wakes them from here.
		//
		// A sleeper's gate keeps its watch for its next wait, as a
		// ramping-vus scenario sleeps on one context every 10 ms: should
		// that context end while the gate is not waiting, the sweep it
		// sets off readies only waiters whose context has ended, which
		// their own watches would ready all the same.
		stop := func() bool { return false }
		if canEnd {
			switch {
			case !g.keepWatch:
				stop = context.AfterFunc(ctx, c.sweepFn)
			case g.watched != ctx:
				if g.unwatch != nil {
					g.unwatch()
				}
				g.watched, g.unwatch = ctx, context.AfterFunc(ctx, c.sweepFn)
			}
		}
		<-g.turn
		stop()
		c.mu.Lock()
		g.ctx = nil
	}
	ok := g.token
	g.token = false
	c.mu.Unlock()
	return ok
}

// stepOnce settles the present instant and, if that readied no task,
// moves to the next instant and fires its timers. It returns false when
// nothing is left to happen. Called and returns with c.mu held; releases
// it while participants and timers run (Opens then only queue tasks: the
// stepper has the turn).
func (c *VirtualClock) stepOnce() bool {
	now := c.now
	// A copy, as participants may join or leave while they settle; the
	// stepper (one at a time) keeps its storage, and copies again only
	// once they did.
	if c.stepPartsGen != c.partsGen {
		c.stepParts = append(c.stepParts[:0], c.parts...)
		c.stepPartsGen = c.partsGen
	}
	parts := c.stepParts
	if c.outside {
		c.activity.Add(1)
	}
	c.mu.Unlock()
	for _, p := range parts {
		p.p.Settle(now)
	}
	next, ok := time.Duration(0), false
	for _, p := range parts {
		if t, has := p.p.Next(); has && (!ok || t < next) {
			next, ok = t, true
		}
	}
	c.mu.Lock()
	if len(c.runq) > 0 {
		return true // someone woke: they run at this instant
	}
	if len(c.timers) > 0 && (!ok || c.timers[0].at <= next) {
		next, ok = c.timers[0].at, true
	}
	if !ok {
		return false
	}
	if next > c.now && c.pace != nil && !c.paceLocked(next) {
		return true // look again: something came from outside meanwhile
	}
	c.advanceLocked(next)
	for len(c.timers) > 0 && c.timers[0].at <= c.now {
		t := heap.Pop(&c.timers).(*vtimer)
		c.activity.Add(1) // t.f may end a context (WithTimeout)
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
		c.sweepLocked()
	}
	return true
}

// stuckAfter is how long a task may keep its turn without waiting on the
// clock before the clock treats it as stuck in JavaScript (watchStuck):
// that much wall time, in which the process also spent that much CPU
// time. Long enough that no script that waits now and then, on any host,
// comes near it: a turn ends at every sleep, request and iteration of a
// script that waits at all. The CPU condition keeps a host that starves
// the process (a loaded CI runner, a stop of the process) from passing
// for a stuck script: a task in `while (true) {}` burns a core, a task
// waiting for the CPU burns nothing.
const stuckAfter = 500 * time.Millisecond

// watchStuck watches for a task that keeps its turn — a VU in
// `while (true) {}`, or in any computation longer than stuckAfter — and
// then moves the clock on without it, at the wall clock's pace from the
// moment it took the turn, firing the timers that come due: the time such
// a task takes counts as wall time, so the scenario's duration,
// gracefulStop and maxDuration end it by interrupting its runtime, as
// they do on the wall clock. Nothing else runs until it gives the turn
// up; participants settle then. onStuck is called (on the watch's
// goroutine) each time a task is found stuck. stop ends the watch.
func (c *VirtualClock) watchStuck(onStuck func()) (stop func()) {
	return c.watchStuckWith(onStuck, cputime.Self)
}

// watchStuckWith is watchStuck with the process's CPU time read by
// cpuTime (tests give a fake one).
func (c *VirtualClock) watchStuckWith(onStuck func(), cpuTime func() time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(stuckAfter / 4)
		defer tick.Stop()
		var seen uint64
		var since time.Time // when the watch first saw turn seen held
		var cpuSince time.Duration
		var base time.Duration
		stuck := false
		for {
			var now time.Time
			select {
			case <-done:
				return
			case now = <-tick.C:
			}
			c.mu.Lock()
			if !c.busy || c.stepping || c.handoffs != seen {
				seen, since, stuck = c.handoffs, now, false
				cpuSince = cpuTime()
				c.mu.Unlock()
				continue
			}
			if !stuck && now.Sub(since) >= stuckAfter && cpuTime()-cpuSince >= stuckAfter {
				stuck, base = true, c.now
				if onStuck != nil {
					c.mu.Unlock()
					onStuck()
					c.mu.Lock()
				}
			}
			if stuck {
				c.runWhileStuckLocked(base + now.Sub(since))
			}
			c.mu.Unlock()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// runWhileStuckLocked moves the clock to at, firing the timers due by
// then in order, while a task keeps its turn (watchStuck). Called and
// returns with c.mu held.
func (c *VirtualClock) runWhileStuckLocked(at time.Duration) {
	for len(c.timers) > 0 && c.timers[0].at <= at && c.busy {
		t := heap.Pop(&c.timers).(*vtimer)
		c.advanceLocked(t.at)
		c.activity.Add(1)
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
		c.sweepLocked()
	}
	if c.busy {
		c.advanceLocked(at)
	}
}
