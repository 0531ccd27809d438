package harness

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvstrand/mocker/harness/metrics"
	"github.com/kvstrand/mocker/harness/options"
	"github.com/kvstrand/mocker/harness/schedule"
)

// scenarioRun is one scenario's execution: its VUs and counters.
type scenarioRun struct {
	t    *testRun
	cfg  *options.Scenario
	tags metrics.Tags // options.tags + scenario tags + scenario name

	vus []*vu // initialised before the test starts

	startedAt  time.Time
	regularEnd time.Time // when the regular duration ends
	started    atomic.Bool
	finished   atomic.Bool
	stopped    atomic.Bool  // finished because the test was cancelled
	ranFor     atomic.Int64 // nanoseconds from start to finish, once finished
	iterInTest atomic.Int64
	completed  atomic.Int64
	active     atomic.Int64
	dropped    atomic.Int64
}

// elapsed is how long the scenario has been running; it stops growing when
// the scenario finishes.
func (s *scenarioRun) elapsed() time.Duration {
	if s.finished.Load() {
		return time.Duration(s.ranFor.Load())
	}
	if !s.started.Load() {
		return 0
	}
	return s.t.clock.Now().Sub(s.startedAt)
}

// progress is exec.scenario.progress: the share of the planned work done,
// in [0, 1].
func (s *scenarioRun) progress() float64 {
	if s.finished.Load() {
		return 1
	}
	return s.share()
}

// share is the part of the planned work done: iterations for the
// iteration executors, time for the others. Unlike progress it stays below
// 1 for a scenario the test stopped early.
func (s *scenarioRun) share() float64 {
	var p float64
	if planned := s.cfg.PlannedIterations(); planned > 0 {
		p = float64(s.completed.Load()) / float64(planned)
	} else {
		p = float64(s.elapsed()) / float64(s.cfg.TotalDuration())
	}
	return math.Min(1, math.Max(0, p))
}

// run waits for the scenario's startTime, then runs its executor until the
// regular duration ends, giving in-flight iterations gracefulStop more.
func (s *scenarioRun) run(ctx context.Context) {
	defer func() {
		if s.started.Load() {
			s.ranFor.Store(int64(s.t.clock.Now().Sub(s.startedAt)))
		}
		s.stopped.Store(ctx.Err() != nil)
		s.finished.Store(true)
	}()
	clock := s.t.clock
	if s.cfg.StartTime > 0 && !clock.Sleep(ctx, s.cfg.StartTime) {
		return
	}
	s.startedAt = clock.Now()
	s.started.Store(true)
	total := s.cfg.TotalDuration()
	regular, cancelRegular := clock.WithTimeout(ctx, total)
	defer cancelRegular()
	hard, cancelHard := clock.WithTimeout(ctx, total+s.cfg.GracefulStop)
	defer cancelHard()
	s.regularEnd = s.startedAt.Add(total)

	switch s.cfg.Executor {
	case options.ExecSharedIterations:
		s.runSharedIterations(regular, hard)
	case options.ExecPerVUIterations:
		s.runPerVUIterations(regular, hard)
	case options.ExecConstantVUs:
		s.runLooping(regular, hard)
	case options.ExecRampingVUs:
		s.runRampingVUs(regular, hard)
	case options.ExecConstantArrival, options.ExecRampingArrivalRate:
		s.runArrivalRate(ctx, regular, hard)
	}
}

// loop runs iterations on v while the regular deadline holds and next
// allows one more; it stops at the first interrupted iteration. active is
// called once the VU counts as active.
func (s *scenarioRun) loop(v *vu, regular, hard context.Context, next func() bool, active func()) {
	release := v.activate(hard)
	defer release()
	defer v.waiting()
	v.enterScenario(s)
	fn := v.fns[s.cfg.Exec]
	s.active.Add(1)
	s.t.vusActive.Add(1)
	active()
	defer s.t.vusActive.Add(-1)
	defer s.active.Add(-1)
	for s.running(regular) && next() {
		if v.runIteration(fn) == iterInterrupted {
			return
		}
		s.completed.Add(1)
	}
}

// eachVU runs f on every VU of the scenario at once. f calls active when
// its VU becomes active; once all have (or returned), the test's first
// vus sample is taken if no scenario took it yet.
func (s *scenarioRun) eachVU(f func(v *vu, active func())) {
	wg := newTasks(s.t.clock)
	var left atomic.Int64
	left.Store(int64(len(s.vus)))
	for _, v := range s.vus {
		once := sync.OnceFunc(func() {
			if left.Add(-1) == 0 {
				s.t.vusStarted(int64(len(s.vus)))
			}
		})
		wg.Go(func() {
			defer once()
			f(v, once)
		})
	}
	wg.Wait()
}

func (s *scenarioRun) runSharedIterations(regular, hard context.Context) {
	var taken atomic.Int64
	total := s.cfg.Iterations
	s.eachVU(func(v *vu, active func()) {
		s.loop(v, regular, hard, func() bool { return taken.Add(1) <= total }, active)
	})
	if left := total - min(taken.Load(), total); left > 0 {
		s.drop(left)
	}
}

func (s *scenarioRun) runPerVUIterations(regular, hard context.Context) {
	s.eachVU(func(v *vu, active func()) {
		var done int64
		s.loop(v, regular, hard, func() bool {
			if done >= s.cfg.Iterations {
				return false
			}
			done++
			return true
		}, active)
		if left := s.cfg.Iterations - done; left > 0 {
			s.drop(left)
		}
	})
}

func (s *scenarioRun) runLooping(regular, hard context.Context) {
	s.eachVU(func(v *vu, active func()) {
		s.loop(v, regular, hard, func() bool { return true }, active)
	})
}

// running reports whether the regular duration still lasts. It reads the
// clock as well as regular.Err: on the wall clock the context learns of
// its deadline from a timer goroutine, which a busy machine can run late,
// and no iteration may start after the scenario's end.
func (s *scenarioRun) running(regular context.Context) bool {
	if regular.Err() != nil {
		return false
	}
	return s.regularEnd.IsZero() || s.t.clock.Now().Before(s.regularEnd)
}

// drop counts iterations that were planned but never started.
func (s *scenarioRun) drop(n int64) {
	s.dropped.Add(n)
	s.t.push(metrics.Sample{Metric: s.t.bm.droppedIterations, Tags: s.tags, Time: s.t.clock.Now(), Value: float64(n)})
}

// rampSlot is one VU of a ramping-vus scenario, active while the target VU
// count is above its index.
type rampSlot struct {
	v      *vu
	active atomic.Bool
	wake   Gate
	mu     sync.Mutex
	// cancel ends the context the VU runs its iterations in (nil while
	// it has none); taken says a ramp-down has scheduled a call of it,
	// so the context must not outlive the iteration in flight.
	cancel context.CancelFunc
	taken  bool
}

func (sl *rampSlot) signal() { sl.wake.Open() }

func (s *scenarioRun) runRampingVUs(regular, hard context.Context) {
	slots := make([]*rampSlot, len(s.vus))
	for i, v := range s.vus {
		slots[i] = &rampSlot{v: v, wake: s.t.clock.NewGate()}
	}
	clock := s.t.clock
	var (
		timersMu sync.Mutex
		timers   []func() bool
	)
	apply := func(target int64) {
		for i, sl := range slots {
			want := int64(i) < target
			if sl.active.Load() == want {
				continue
			}
			sl.active.Store(want)
			if want {
				sl.signal()
				continue
			}
			// A VU leaving during ramp-down finishes its iteration, but only
			// for gracefulRampDown.
			sl.mu.Lock()
			cancel := sl.cancel
			sl.taken = cancel != nil
			sl.mu.Unlock()
			if cancel != nil {
				timersMu.Lock()
				timers = append(timers, clock.AfterFunc(s.cfg.GracefulRampDown, func() {
					cancel()
					clock.cancelled()
				}))
				timersMu.Unlock()
			}
		}
	}
	applied := schedule.RampingTarget(s.cfg.StartVUs, s.cfg.Stages, 0)
	apply(applied)

	wg := newTasks(clock)
	for _, sl := range slots {
		wg.Go(func() { s.rampVU(sl, regular, hard) })
	}
	// The target is read every rampTick, but the controller sleeps through
	// the ticks at which it would read the same target: on a paced or
	// virtual clock each wake-up is a step of the whole run, and a long
	// stage held at one VU count asked for thousands of them.
	for clock.Sleep(regular, s.nextRampChange(clock.Now().Sub(s.startedAt), applied)) {
		applied = schedule.RampingTarget(s.cfg.StartVUs, s.cfg.Stages, clock.Now().Sub(s.startedAt))
		apply(applied)
	}
	wg.Wait()
	timersMu.Lock()
	for _, stop := range timers {
		stop()
	}
	timersMu.Unlock()
}

// rampTick is how often a ramping-vus scenario's VU target is read.
const rampTick = 10 * time.Millisecond

// maxRampSleep bounds how many ticks nextRampChange looks ahead (and the
// controller sleeps) at once: a day-long stage held at one target is a
// wake-up every ten seconds rather than a scan of millions of ticks.
const maxRampSleep = 1000

// nextRampChange is how long after elapsed the first tick comes at which
// the ramping target differs from applied, the one the VUs follow (at
// most maxRampSleep ticks; a whole number of ticks, so the target is read
// at the ticks it would be read at every rampTick).
func (s *scenarioRun) nextRampChange(elapsed time.Duration, applied int64) time.Duration {
	k := 1
	for ; k < maxRampSleep; k++ {
		if schedule.RampingTarget(s.cfg.StartVUs, s.cfg.Stages, elapsed+time.Duration(k)*rampTick) != applied {
			break
		}
	}
	return time.Duration(k) * rampTick
}

func (s *scenarioRun) rampVU(sl *rampSlot, regular, hard context.Context) {
	v := sl.v
	v.enterScenario(s)
	fn := v.fns[s.cfg.Exec]
	defer v.waiting()
	// The VU runs its iterations in a context of its own, which a
	// ramp-down cancels (after gracefulRampDown) to cut short the
	// iteration in flight. One context, and one activation watching it,
	// serves a run of iterations while the VU stays active and no
	// ramp-down has taken its cancel: a context and a watcher per
	// iteration were several allocations per request, and a cancel
	// taken by a ramp-down still ends exactly the iteration it was taken
	// in, since that iteration's end retires the context. So does an
	// iteration that ended in an error: whatever it left in flight on
	// the context (a request whose callback the event loop dropped) is
	// cancelled as it ends, as when every iteration had a context.
	var (
		release func()
		cancel  context.CancelFunc
	)
	retire := func() {
		if cancel == nil {
			return
		}
		release()
		sl.mu.Lock()
		sl.cancel, sl.taken = nil, false
		sl.mu.Unlock()
		cancel()
		release, cancel = nil, nil
	}
	defer retire()
	for s.running(regular) {
		if !sl.active.Load() {
			retire()
			v.waiting()
			if !sl.wake.Wait(regular) {
				return
			}
			continue
		}
		if cancel == nil {
			var iterCtx context.Context
			iterCtx, cancel = context.WithCancel(hard)
			sl.mu.Lock()
			sl.cancel = cancel
			sl.mu.Unlock()
			release = v.activate(iterCtx)
		} else {
			v.rearm()
		}
		s.active.Add(1)
		s.t.vusActive.Add(1)
		s.t.vusStarted(1)
		res := v.runIteration(fn)
		s.t.vusActive.Add(-1)
		s.active.Add(-1)
		sl.mu.Lock()
		taken := sl.taken
		sl.mu.Unlock()
		if res != iterCompleted || taken || v.iterFailed || v.ctx.Err() != nil {
			retire()
		}
		if res == iterCompleted {
			s.completed.Add(1)
		} else if hard.Err() != nil {
			return
		}
	}
}

func (s *scenarioRun) runArrivalRate(testCtx, regular, hard context.Context) {
	t := s.t
	pool := make(chan *vu, s.cfg.MaxVUs)
	for _, v := range s.vus {
		pool <- v
	}
	var (
		initialized = int64(len(s.vus))
		initing     atomic.Bool
		warned      bool
	)
	clock := t.clock
	wg := newTasks(clock)
	workers := map[*vu]*arrivalWorker{}
	var started []*arrivalWorker // in the order they started
	sched := s.arrivals()
	for {
		off, ok := sched.Next()
		if !ok {
			// No start is left in the plan (the rate ramps down to 0): the
			// scenario still lasts its planned duration, as in k6.
			clock.NewGate().Wait(regular)
			break
		}
		if wait := s.startedAt.Add(off).Sub(clock.Now()); wait > 0 {
			clock.Sleep(regular, wait)
		}
		if !s.running(regular) {
			// The loop woke after the scenario's end. The starts the plan
			// still holds are dropped, this one included, so that started
			// and dropped iterations always add up to the plan; a test that
			// was stopped drops nothing more, as in k6.
			if testCtx.Err() == nil {
				n := int64(1)
				for _, more := sched.Next(); more; _, more = sched.Next() {
					n++
				}
				s.drop(n)
			}
			break
		}
		select {
		case v := <-pool:
			w := workers[v]
			if w == nil {
				w = &arrivalWorker{v: v, gate: clock.NewGate()}
				workers[v] = w
				started = append(started, w)
				w.work.Store(true)
				wg.Go(func() { s.runArrivalWorker(w, hard, pool) })
				break
			}
			w.work.Store(true)
			w.gate.Open()
		default:
			s.drop(1)
			switch {
			case initialized < s.cfg.MaxVUs && !initing.Load():
				initialized++
				initing.Store(true)
				wg.Go(func() {
					defer initing.Store(false)
					v, err := t.initVU(testCtx)
					if err != nil {
						t.logger.Error("initialising an extra VU failed", "scenario", s.cfg.Name, "error", exceptionText(err))
						return
					}
					pool <- v
				})
			case initialized >= s.cfg.MaxVUs && !warned:
				warned = true
				t.logger.Warn("Insufficient VUs, reached "+itoa(s.cfg.MaxVUs)+" active VUs and cannot initialize more", "scenario", s.cfg.Name)
			}
		}
	}
	for _, w := range started {
		w.stop.Store(true)
		w.gate.Open()
	}
	wg.Wait()
}

// arrivalWorker runs the iterations an arrival-rate scenario hands one VU,
// on one goroutine for the whole scenario: a goroutine per iteration
// would grow a fresh stack to the depth of a JS call every time. The
// executor hands it an iteration by setting work and opening gate, just
// where it would have started a task for it, so turns on a virtual clock
// come in the same order.
type arrivalWorker struct {
	v    *vu
	gate Gate
	work atomic.Bool // an iteration is handed to it
	stop atomic.Bool // the scenario is over: return once no work is left
}

func (s *scenarioRun) runArrivalWorker(w *arrivalWorker, hard context.Context, pool chan<- *vu) {
	for {
		if w.work.CompareAndSwap(true, false) {
			s.arrivalIteration(w.v, hard)
			pool <- w.v
			continue
		}
		if w.stop.Load() {
			return
		}
		w.gate.Wait(context.Background())
	}
}

func (s *scenarioRun) arrivalIteration(v *vu, hard context.Context) {
	release := v.activate(hard)
	defer release()
	defer v.waiting()
	if v.sc != s {
		v.enterScenario(s)
	}
	s.active.Add(1)
	s.t.vusActive.Add(1)
	s.t.vusStarted(1)
	if v.runIteration(v.fns[s.cfg.Exec]) == iterCompleted {
		s.completed.Add(1)
	}
	s.t.vusActive.Add(-1)
	s.active.Add(-1)
}
