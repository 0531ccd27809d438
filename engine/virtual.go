package engine

import (
	"fmt"
	"math"
	"slices"
)

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
	vWake    vkind = iota
	vInput         // a scheduled Input
	vSourced       // an arrival pulled from the ArrivalSource
	vCall          // a callback at a modeled time
	vTicket        // a placeholder for an input whose content is not known yet
	vBatch         // the next call of a CallEach run
)

// vevent is a queued event. It holds no pointers, so that the heap moves
// it with plain copies: an event's input or callback (and a ticket's
// fill) waits in the payload its arg names, a wake-up's arg is its slot's
// generation, a CallEach call's its run's place in batches.
type vevent struct {
	at     float64
	seq    uint64
	arg    uint64
	worker int32
	kind   vkind
}

// vpayload is what an event carries besides its place in the queue. A
// ticket's is filled later; seq, the ticket's, tells a fill of a ticket
// already gone from one of the payload's later use.
type vpayload struct {
	in     Input
	call   func()
	worker int
	seq    uint64
	filled bool
	ticket bool
}

// InputResult is what a scheduled Input did when it reached its worker. At
// is when it reached the worker; during a pass an input that targets a
// request takes effect at the pass's End (Worker.InputAt), and its events
// carry that time.
type InputResult struct {
	At     float64
	Worker int
	Input  Input
	Reply  Reply
}

// Ticket holds a place in the event queue for an input whose content is
// not known yet: a reply that must come back from outside the loop (a
// socket, another process). The queue stops before a ticket until it is
// filled or voided, so modeled time never passes a step whose reply is
// pending, and the reply takes the place in the order it would have had
// had it been known at once.
type Ticket struct {
	At  float64
	seq uint64
	pay uint64
}

type vslot struct {
	out        *Output // produced by the last Step, delivered at its End
	lead, rest Output  // a pass's Output split for delivery (splitLead)
	scheduled  bool
	wakeAt     float64
	gen        uint64
}

// Virtual drives workers on one discrete-event queue in modeled time.
// Events at equal times run in the order they were scheduled, so the same
// inputs and seeds give the same outputs, byte for byte. Virtual never
// reads a clock: RunUntil processes events up to a time, as fast as the
// computation goes, and a driver that paces against the wall clock (the
// cluster's) calls it with the modeled time the wall clock allows.
type Virtual struct {
	workers []*Worker
	slots   []vslot
	q       []vevent
	nowQ    []vevent // events at now, from nowAt on (see push)
	nowAt   int
	seq     uint64
	now     float64
	src     ArrivalSource
	err     error
	// payloads holds the inputs, callbacks and tickets of queued events;
	// freePay are the unused ones.
	payloads []vpayload
	freePay  []uint64
	batches  []*vbatch // CallEach runs, each with its next call in q

	// OnOutput, when set, receives every worker Output at its End (the
	// clock reads End during the call). The events that precede a pass
	// (caused by inputs and deadlines) come at once in an Output of their
	// own, and the pass's Output at its End carries the pass's events only.
	// It may schedule more inputs; it must not keep out past the call.
	OnOutput func(worker int, out *Output)
	// OnInput, when set, receives the result of every scheduled Input as it
	// is applied, a refused Submit or Reserve (Reply.Err) included, which
	// then does not stop the run. It may schedule more inputs.
	OnInput func(r InputResult)
}

// NewVirtual builds a driver over workers, with the clock at 0.
func NewVirtual(workers ...*Worker) *Virtual {
	return &Virtual{workers: workers, slots: make([]vslot, len(workers))}
}

// Now is the clock in modeled ms: the time of the event being processed,
// or of the last one, or where AdvanceTo moved it.
func (v *Virtual) Now() float64 { return v.now }

// Worker returns worker i.
func (v *Virtual) Worker(i int) *Worker { return v.workers[i] }

// InFlight reports whether worker i's last pass is in flight: its Output,
// KV events included, is delivered at its End, still to come.
func (v *Virtual) InFlight(i int) bool { return v.slots[i].out != nil }

// Workers is the number of workers.
func (v *Virtual) Workers() int { return len(v.workers) }

// Schedule hands in to worker at modeled time at (clamped to now). A
// Submit's or Reserve's token and hash slices are read when the input
// fires, so they must stay unchanged until then; a refusal of either stops
// the run unless OnInput is set to hear it.
func (v *Virtual) Schedule(at float64, worker int, in Input) {
	v.push(vevent{at: max(at, v.now), kind: vInput, worker: int32(worker), arg: v.carry(vpayload{in: in})})
}

// Call runs fn at modeled time at (clamped to now), in its place among the
// events of that time. fn may schedule more events.
func (v *Virtual) Call(at float64, fn func()) {
	v.push(vevent{at: max(at, v.now), kind: vCall, arg: v.carry(vpayload{call: fn})})
}

// carry keeps p for an event and returns its place.
func (v *Virtual) carry(p vpayload) uint64 {
	if n := len(v.freePay); n > 0 {
		i := v.freePay[n-1]
		v.freePay = v.freePay[:n-1]
		v.payloads[i] = p
		return i
	}
	v.payloads = append(v.payloads, p)
	return uint64(len(v.payloads) - 1)
}

// take returns the payload at i and frees its place.
func (v *Virtual) take(i uint64) vpayload {
	p := v.payloads[i]
	v.payloads[i] = vpayload{}
	v.freePay = append(v.freePay, i)
	return p
}

// CallEach runs fn(i) at modeled time at(i) for every i in [0, n), each in
// the place among the events of its time that n calls to Call, made now in
// order, would give it; the times must not decrease, and are clamped to
// now as Call's are. at(i) is read once, as call i-1 runs (before fn).
// Only the next call of a run is in the event queue, so a long batch (a
// run's arrivals) costs neither queue space nor a closure each, and the
// queue stays as small as what is in flight.
func (v *Virtual) CallEach(n int, at func(i int) float64, fn func(i int)) {
	if n <= 0 {
		return
	}
	v.addBatch(&vbatch{seq0: v.seq, n: n, floor: v.now, at: at, fn: fn})
}

// addBatch takes b's places in the event order and queues its first call.
func (v *Virtual) addBatch(b *vbatch) {
	i := len(v.batches)
	if k := slices.Index(v.batches, nil); k >= 0 {
		i = k
	} else {
		v.batches = append(v.batches, nil)
	}
	v.batches[i] = b
	v.seq += uint64(b.n)
	v.queueBatch(i)
}

// StreamSpan is the number of places in the event order a CallStream run
// takes: far more calls than any run makes (2^48), and far fewer than the
// sequence numbers a run could ever use up.
const StreamSpan = 1 << 48

// CallStream is CallEach over a run whose length is not known ahead:
// next(i) gives call i's time, or ok false to end the run, and is read
// once, as call i-1 runs (before fn), or now for call 0. The calls take
// the places CallEach(StreamSpan, ...) would give them, so a stream of n
// arrivals is ordered among the other events exactly as CallEach(n, ...)
// would order it. Times must not decrease; one earlier than now is
// clamped to now.
func (v *Virtual) CallStream(next func(i int) (at float64, ok bool), fn func(i int)) {
	v.addBatch(&vbatch{seq0: v.seq, n: StreamSpan, floor: v.now, more: next, fn: fn})
}

// vbatch is a CallEach or CallStream run: call i has sequence number
// seq0+i.
type vbatch struct {
	seq0    uint64
	next, n int
	floor   float64 // now when the run was scheduled
	at      func(i int) float64
	more    func(i int) (float64, bool) // a CallStream run's, instead of at
	fn      func(i int)
}

// queueBatch queues the next call of batches[i], at its own sequence
// number, or ends a CallStream run whose source has no more.
func (v *Virtual) queueBatch(i int) {
	b := v.batches[i]
	var at float64
	if b.more != nil {
		t, ok := b.more(b.next)
		if !ok {
			v.batches[i] = nil
			return
		}
		at = max(t, v.now)
	} else {
		at = b.at(b.next)
	}
	v.place(vevent{at: max(at, b.floor), seq: b.seq0 + uint64(b.next), kind: vBatch, arg: uint64(i)})
}

// fireBatch runs the next call of batches[i], queueing the one after.
func (v *Virtual) fireBatch(i int) {
	b := v.batches[i]
	k := b.next
	b.next++
	if b.next < b.n {
		v.queueBatch(i)
	} else {
		v.batches[i] = nil
	}
	b.fn(k)
}

// Ticket reserves a place at modeled time at (clamped to now) for an event
// to be filled in later (FillCall or Void). RunUntil does not
// pass an unfilled ticket.
func (v *Virtual) Ticket(at float64) Ticket {
	seq := v.seq
	e := vevent{at: max(at, v.now), kind: vTicket, arg: v.carry(vpayload{ticket: true, seq: seq})}
	v.push(e)
	return Ticket{At: e.at, seq: seq, pay: e.arg}
}

// FillCall makes ticket t a callback run at the ticket's time and place.
func (v *Virtual) FillCall(t Ticket, fn func()) {
	v.fill(t, vpayload{call: fn})
}

// Void releases ticket t with nothing to do.
func (v *Virtual) Void(t Ticket) { v.fill(t, vpayload{}) }

// fill fills ticket t with f unless it is filled already or gone.
func (v *Virtual) fill(t Ticket, f vpayload) {
	if t.pay >= uint64(len(v.payloads)) {
		return
	}
	if cur := &v.payloads[t.pay]; cur.ticket && cur.seq == t.seq && !cur.filled {
		f.ticket, f.seq, f.filled = true, t.seq, true
		*cur = f
	}
}

// PendingTickets counts tickets not yet filled or voided.
func (v *Virtual) PendingTickets() int {
	n := 0
	for i := range v.payloads {
		if p := &v.payloads[i]; p.ticket && !p.filled {
			n++
		}
	}
	return n
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
	v.push(vevent{at: max(a.At, v.now), kind: vSourced, worker: int32(a.Worker),
		arg: v.carry(vpayload{in: &Submit{Request: a.Request, Policy: a.Policy}})})
}

// Next reports the time of the earliest event; blocked is true when that
// event is a ticket still waiting to be filled. ok is false when the queue
// is empty.
func (v *Virtual) Next() (at float64, blocked, ok bool) {
	e := v.head()
	if e == nil {
		return 0, false, false
	}
	return e.at, v.blocks(e), true
}

// NextLive is Next for a driver that reports the time to another queue:
// it first drops, from the head, the wake-ups a later one superseded,
// which would do nothing when they came up. Another queue that ran the
// workers at such a time would make an extra step, and lose the place
// of the real one.
func (v *Virtual) NextLive() (at float64, ok bool) {
	for {
		if e := v.head(); e == nil || e.kind != vWake || e.arg == v.slots[e.worker].gen {
			break
		}
		v.popHead()
	}
	at, _, ok = v.Next()
	return at, ok
}

// blocks reports whether e, the queue's head, is a ticket still waiting
// to be filled.
func (v *Virtual) blocks(e *vevent) bool {
	return e.kind == vTicket && !v.payloads[e.arg].filled
}

// AdvanceTo moves the clock forward to t without processing anything, for
// a driver that stamps inputs with the time its wall clock allows. It
// never moves past the earliest queued event nor backwards.
func (v *Virtual) AdvanceTo(t float64) {
	if e := v.head(); e != nil {
		t = min(t, e.at)
	}
	v.now = max(v.now, t)
}

// Run processes events until none is left and returns the first input error
// (a bad request), which also stops the run. It returns early, with no
// error, at an unfilled ticket.
func (v *Virtual) Run() error { return v.RunUntil(-1) }

// RunUntil processes events up to modeled time until (negative: no limit)
// and leaves the clock there, or stops early at an unfilled ticket.
func (v *Virtual) RunUntil(until float64) error { return v.runTo(until, math.MaxUint64) }

// RunDue is RunUntil(until) for a driver whose steps another queue
// orders (a worker whose clock a router's loop drives, one step of the
// router's queue at a time): of the events at until it processes only
// those queued before the call. Those they queue at the same instant
// wait for the next call, as they would queue behind what the other
// queue already holds at that instant.
func (v *Virtual) RunDue(until float64) error { return v.runTo(until, v.seq) }

// runTo processes events up to until (negative: no limit), at until only
// those queued before seq limit, and leaves the clock at until unless it
// stopped at an unfilled ticket.
func (v *Virtual) runTo(until float64, limit uint64) error {
	for v.err == nil {
		h, now := v.headOf()
		if h == nil || (until >= 0 && h.at > until) {
			break
		}
		if v.blocks(h) {
			return v.err
		}
		if h.at == until && h.seq >= limit {
			break
		}
		e := v.take1(now)
		v.now = e.at
		v.handle(&e)
	}
	if until >= 0 && v.err == nil && until > v.now && !v.blocked() {
		v.AdvanceTo(until)
	}
	return v.err
}

func (v *Virtual) blocked() bool {
	_, b, _ := v.Next()
	return b
}

// Err is the error that stopped the run, if any.
func (v *Virtual) Err() error { return v.err }

func (v *Virtual) handle(e *vevent) {
	if e.kind == vBatch {
		v.fireBatch(int(e.arg))
		return
	}
	var p vpayload
	if e.kind != vWake {
		p = v.take(e.arg)
	}
	switch e.kind {
	case vCall:
		p.call()
		return
	case vTicket:
		switch {
		case p.call != nil:
			p.call()
		case p.in != nil:
			v.apply(p.worker, p.in)
		}
		return
	}
	w := int(e.worker)
	if w < 0 || w >= len(v.workers) {
		v.err = fmt.Errorf("virtual: event for worker %d, only %d workers", w, len(v.workers))
		return
	}
	switch e.kind {
	case vWake:
		v.wake(w, e.arg)
	case vSourced:
		v.apply(w, p.in)
		v.pull()
	default:
		v.apply(w, p.in)
	}
}

// Apply hands in to worker w at the clock's now, at once, and reports it
// as a scheduled input is reported: it takes effect ahead of the events
// already queued at this instant. It is for a driver whose inputs were
// put in order by another queue (a worker whose clock a router's loop
// drives), which has run this queue's events at the instant that come
// before the input.
func (v *Virtual) Apply(w int, in Input) { v.apply(w, in) }

// apply hands in to worker w now and reports it.
func (v *Virtual) apply(w int, in Input) {
	if w < 0 || w >= len(v.workers) {
		v.err = fmt.Errorf("virtual: input for worker %d, only %d workers", w, len(v.workers))
		return
	}
	r := v.workers[w].Apply(v.now, in)
	if r.Err != nil && v.OnInput == nil {
		// Nobody hears the refusal: stop the run with it.
		v.err = fmt.Errorf("virtual: worker %d at %.3f ms: %w", w, v.now, r.Err)
		return
	}
	if v.OnInput != nil {
		v.OnInput(InputResult{At: v.now, Worker: w, Input: in, Reply: r})
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
	v.push(vevent{at: t, kind: vWake, worker: int32(w), arg: sl.gen})
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

// The queue is two: q, a binary min-heap on (at, seq), and nowQ, the
// events queued for the clock's now, in the order they were queued. Every
// event has its own seq, so the order events come out in is fixed
// whatever the heap's layout. Most events a step queues are for now (an
// input, the reply it brings, a ticket), and go through nowQ without
// sifting: its events all have the same time, the clock's (the clock
// never passes a queued event), and sequence numbers that rise, so its
// head is its earliest, and the queue's head is the earlier of the two
// heads.
//
// push queues e at the next sequence number.
func (v *Virtual) push(e vevent) {
	e.seq = v.seq
	v.seq++
	if e.at == v.now {
		v.nowQ = append(v.nowQ, e)
		return
	}
	v.place(e)
}

// head is the earliest queued event, nil when none is.
func (v *Virtual) head() *vevent {
	e, _ := v.headOf()
	return e
}

// headOf is head, and whether it is nowQ's.
func (v *Virtual) headOf() (e *vevent, now bool) {
	if v.nowAt < len(v.nowQ) {
		n := &v.nowQ[v.nowAt]
		if len(v.q) > 0 && before(&v.q[0], n) {
			return &v.q[0], false
		}
		return n, true
	}
	if len(v.q) > 0 {
		return &v.q[0], false
	}
	return nil, false
}

// popHead removes and returns the earliest queued event, of which there
// must be one.
func (v *Virtual) popHead() vevent {
	_, now := v.headOf()
	return v.take1(now)
}

// take1 removes and returns the head, nowQ's when now.
func (v *Virtual) take1(now bool) vevent {
	if now {
		e := v.nowQ[v.nowAt]
		if v.nowAt++; v.nowAt == len(v.nowQ) {
			v.nowQ, v.nowAt = v.nowQ[:0], 0
		}
		return e
	}
	return v.pop()
}

// place and pop keep q a heap. Both sift a hole rather than swap: an
// event is moved once per level instead of twice, and the one being
// placed is written once.

// place adds e, whose seq is set, to the heap.
func (v *Virtual) place(e vevent) {
	v.q = append(v.q, vevent{})
	q := v.q
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !before(&e, &q[p]) {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = e
}

func (v *Virtual) pop() vevent {
	q := v.q
	top := q[0]
	n := len(q) - 1
	last := q[n]
	q[n] = vevent{}
	q = q[:n]
	v.q = q
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && before(&q[r], &q[c]) {
			c = r
		}
		if !before(&q[c], &last) {
			break
		}
		q[i] = q[c]
		i = c
	}
	q[i] = last
	return top
}

// before orders events by time, then by the order they were scheduled.
func before(a, b *vevent) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}
