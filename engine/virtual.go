package engine

import "fmt"

// Arrival is a request reaching a worker at modeled time At.
type Arrival struct {
	At      float64
	Worker  int
	Request Request
	Policy  CompletionPolicy
}

// ArrivalSource yields arrivals in non-decreasing At order; ok false ends the
// stream. Virtual pulls the next arrival only after submitting the previous
// one, so a source may reuse its token buffer between calls.
type ArrivalSource func() (a Arrival, ok bool)

type vkind uint8

const (
	vWake vkind = iota
	vArrival
	vSourced
	vRelease
	vCancel
	vTransfer
	vReserve
	vActivate
	vCancelDest
	vReady
)

type vevent struct {
	at      float64
	seq     uint64
	kind    vkind
	outcome Outcome
	policy  CompletionPolicy
	worker  int32
	tokens  int32
	gen     uint64
	id      uint64
	req     Request
}

// InputKind names a scheduled input whose answer Virtual reports.
type InputKind uint8

// Inputs reported through Virtual.OnInput.
const (
	InputReleaseHeld InputKind = iota + 1
	InputCancel
	InputStartTransfer
	InputActivate
	InputCancelDestination
	InputDestinationReady
)

// String returns the input's method name.
func (k InputKind) String() string {
	switch k {
	case InputReleaseHeld:
		return "ReleaseHeld"
	case InputCancel:
		return "Cancel"
	case InputStartTransfer:
		return "StartTransfer"
	case InputActivate:
		return "Activate"
	case InputCancelDestination:
		return "CancelDestination"
	case InputDestinationReady:
		return "DestinationReady"
	}
	return "unknown"
}

// InputResult is the answer a scheduled input got when it reached its
// worker: what the Worker method of the same name returned. At is when it
// reached the worker; during a pass the input takes effect at the pass's
// End (Worker.InputAt), and its events carry that time.
type InputResult struct {
	Kind      InputKind
	At        float64
	Worker    int
	RequestID uint64
	// OK is the method's boolean result; false for StartTransfer means the
	// hold is gone and the decode side must be told to abort.
	OK bool
	// DelayMs is StartTransfer's modeled transfer time.
	DelayMs float64
}

type vslot struct {
	out        *Output // produced by the last Step, delivered at its End
	lead, rest Output  // a pass's Output split for delivery (splitLead)
	scheduled  bool
	wakeAt     float64
	gen        uint64
}

// Virtual drives workers on a virtual clock with a discrete-event queue.
// Events at equal times run in the order they were scheduled, so the same
// inputs and seeds give the same outputs, byte for byte. Nothing sleeps: a
// run takes as long as the computation does.
type Virtual struct {
	workers []*Worker
	slots   []vslot
	q       []vevent
	seq     uint64
	now     float64
	src     ArrivalSource
	err     error

	// OnOutput, when set, receives every worker Output at its End (the
	// clock reads End during the call). The events that precede a pass
	// (caused by inputs and deadlines) come at once in an Output of their
	// own, and the pass's Output at its End carries the pass's events only.
	// It may schedule more inputs; it must not keep out past the call.
	OnOutput func(worker int, out *Output)
	// OnInput, when set, receives the result of every scheduled
	// ReleaseHeld, Cancel, StartTransfer, Activate, CancelDestination and
	// DestinationReady as it is applied. It may schedule more inputs.
	OnInput func(r InputResult)
}

// NewVirtual builds a driver over workers, with the clock at 0.
func NewVirtual(workers ...*Worker) *Virtual {
	return &Virtual{workers: workers, slots: make([]vslot, len(workers))}
}

// Now is the virtual clock in modeled ms.
func (v *Virtual) Now() float64 { return v.now }

// Worker returns worker i.
func (v *Virtual) Worker(i int) *Worker { return v.workers[i] }

// Submit schedules req to reach worker at modeled time at (clamped to now).
// The token slice is read when the arrival fires, so it must stay unchanged
// until then.
func (v *Virtual) Submit(at float64, worker int, req Request, policy CompletionPolicy) {
	v.push(vevent{at: max(at, v.now), kind: vArrival, worker: int32(worker), req: req, policy: policy})
}

// ReleaseHeld schedules the end of request id's hold on worker.
func (v *Virtual) ReleaseHeld(at float64, worker int, id uint64, outcome Outcome) {
	v.push(vevent{at: max(at, v.now), kind: vRelease, worker: int32(worker), id: id, outcome: outcome})
}

// Cancel schedules the withdrawal of request id on worker.
func (v *Virtual) Cancel(at float64, worker int, id uint64) {
	v.push(vevent{at: max(at, v.now), kind: vCancel, worker: int32(worker), id: id})
}

// StartTransfer schedules Worker.StartTransfer on worker (the source) at
// modeled time at; OnInput reports its delay, or ok false when the hold was
// gone by then.
func (v *Virtual) StartTransfer(at float64, worker int, id uint64, tokens int) {
	v.push(vevent{at: max(at, v.now), kind: vTransfer, worker: int32(worker), id: id, tokens: int32(min(tokens, 1<<31-1))})
}

// Reserve schedules Worker.Reserve of req on worker (the destination). The
// token slice is read when the input fires. A bad request stops the run
// with an error, as for Submit.
func (v *Virtual) Reserve(at float64, worker int, req Request) {
	v.push(vevent{at: max(at, v.now), kind: vReserve, worker: int32(worker), req: req})
}

// Activate schedules Worker.Activate of reservation id on worker.
func (v *Virtual) Activate(at float64, worker int, id uint64) {
	v.push(vevent{at: max(at, v.now), kind: vActivate, worker: int32(worker), id: id})
}

// CancelDestination schedules Worker.CancelDestination of id on worker.
func (v *Virtual) CancelDestination(at float64, worker int, id uint64) {
	v.push(vevent{at: max(at, v.now), kind: vCancelDest, worker: int32(worker), id: id})
}

// DestinationReady schedules Worker.DestinationReady on worker (a
// destination-first source) at modeled time at: request id leaves the
// bootstrap queue, and its transfer of tokens tokens starts when its KV is
// held. OnInput reports ok false when id was no longer waiting there.
func (v *Virtual) DestinationReady(at float64, worker int, id uint64, tokens int) {
	v.push(vevent{at: max(at, v.now), kind: vReady, worker: int32(worker), id: id, tokens: int32(min(tokens, 1<<31-1))})
}

// Feed adds a stream of arrivals, pulled one at a time so a long run keeps a
// small queue.
func (v *Virtual) Feed(src ArrivalSource) {
	v.src = src
	v.pull()
}

func (v *Virtual) pull() {
	if v.src == nil {
		return
	}
	a, ok := v.src()
	if !ok {
		v.src = nil
		return
	}
	v.push(vevent{at: max(a.At, v.now), kind: vSourced, worker: int32(a.Worker), req: a.Request, policy: a.Policy})
}

// Run processes events until none is left and returns the first input error
// (a bad request), which also stops the run.
func (v *Virtual) Run() error { return v.RunUntil(-1) }

// RunUntil processes events up to modeled time until (negative: no limit)
// and leaves the clock there.
func (v *Virtual) RunUntil(until float64) error {
	for len(v.q) > 0 && v.err == nil {
		if until >= 0 && v.q[0].at > until {
			break
		}
		e := v.pop()
		v.now = e.at
		v.handle(&e)
	}
	if until >= 0 && v.err == nil && until > v.now {
		v.now = until
	}
	return v.err
}

func (v *Virtual) handle(e *vevent) {
	w := int(e.worker)
	if w < 0 || w >= len(v.workers) {
		v.err = fmt.Errorf("virtual: event for worker %d, only %d workers", w, len(v.workers))
		return
	}
	wk := v.workers[w]
	switch e.kind {
	case vWake:
		v.wake(w, e.gen)
		return
	case vArrival, vSourced:
		if err := wk.Submit(v.now, e.req, e.policy); err != nil {
			v.err = fmt.Errorf("virtual: worker %d at %.3f ms: %w", w, v.now, err)
			return
		}
		if e.kind == vSourced {
			v.pull()
		}
	case vReserve:
		if err := wk.Reserve(v.now, e.req); err != nil {
			v.err = fmt.Errorf("virtual: worker %d at %.3f ms: %w", w, v.now, err)
			return
		}
	default:
		r := InputResult{At: v.now, Worker: w, RequestID: e.id}
		switch e.kind {
		case vRelease:
			r.Kind, r.OK = InputReleaseHeld, wk.ReleaseHeld(v.now, e.id, e.outcome)
		case vCancel:
			r.Kind, r.OK = InputCancel, wk.Cancel(v.now, e.id)
		case vTransfer:
			r.Kind = InputStartTransfer
			r.DelayMs, r.OK = wk.StartTransfer(v.now, e.id, int(e.tokens))
		case vActivate:
			r.Kind, r.OK = InputActivate, wk.Activate(v.now, e.id)
		case vCancelDest:
			r.Kind, r.OK = InputCancelDestination, wk.CancelDestination(v.now, e.id)
		case vReady:
			r.Kind, r.OK = InputDestinationReady, wk.DestinationReady(v.now, e.id, int(e.tokens))
		}
		if v.OnInput != nil {
			v.OnInput(r)
		}
	}
	v.poke(w)
}

// poke schedules worker w's next wake-up if it needs an earlier one: the
// delivery of the pass in flight, or whatever the worker asks for (a
// deadline may fall inside the pass).
func (v *Virtual) poke(w int) {
	t, ok := v.workers[w].NextWake()
	if out := v.slots[w].out; out != nil && (!ok || out.End < t) {
		t, ok = out.End, true
	}
	if !ok {
		return
	}
	v.schedule(w, max(t, v.now))
}

func (v *Virtual) schedule(w int, t float64) {
	sl := &v.slots[w]
	if sl.scheduled && sl.wakeAt <= t {
		return
	}
	sl.gen++
	sl.scheduled, sl.wakeAt = true, t
	v.push(vevent{at: t, kind: vWake, worker: int32(w), gen: sl.gen})
}

func (v *Virtual) wake(w int, gen uint64) {
	sl := &v.slots[w]
	if gen != sl.gen {
		return // superseded by an earlier wake-up
	}
	sl.scheduled = false
	if out := sl.out; out != nil && out.End <= v.now {
		sl.out = nil
		v.deliver(w, out)
	}
	// A Step before the End of the pass in flight only flushes events (with
	// End == now) and leaves that pass's Output intact. The events a new
	// pass's Output starts with precede it: they go out now, the pass at
	// its End.
	if out := v.workers[w].Step(v.now); out != nil {
		if out.End > v.now {
			if out.splitLead(&sl.lead, &sl.rest) {
				v.deliver(w, &sl.lead)
				out = &sl.rest
			}
			sl.out = out
		} else {
			v.deliver(w, out)
		}
	}
	v.poke(w)
}

func (v *Virtual) deliver(w int, out *Output) {
	if v.OnOutput != nil {
		v.OnOutput(w, out)
	}
}

func (v *Virtual) push(e vevent) {
	e.seq = v.seq
	v.seq++
	v.q = append(v.q, e)
	i := len(v.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !v.less(i, p) {
			break
		}
		v.q[i], v.q[p] = v.q[p], v.q[i]
		i = p
	}
}

func (v *Virtual) pop() vevent {
	top := v.q[0]
	n := len(v.q) - 1
	v.q[0] = v.q[n]
	v.q[n] = vevent{}
	v.q = v.q[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && v.less(l, m) {
			m = l
		}
		if r < n && v.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		v.q[i], v.q[m] = v.q[m], v.q[i]
		i = m
	}
	return top
}

func (v *Virtual) less(i, j int) bool {
	a, b := &v.q[i], &v.q[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}
