package engine

import (
	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/internal/spare"
)

// Handoffs is implemented by schedulers that take part in disaggregated
// handoffs, on either side. A Worker finds it by type assertion; a scheduler
// without it serves aggregated and Hold-policy requests only, and the
// Worker's handoff methods report that they are unsupported.
//
// A scheduler gets StartTransfer, NextDeadline and FireDue by embedding
// handoffBook, which keeps the scheduler-independent state: source holds,
// their deadlines, destinations waiting or reserved, and the lifecycle
// events. The scheduler itself supplies only what touches its KV and queues:
// Reserve, Activate, CancelDestination and the book's freeHold hook.
//
// Input methods append the events they cause to events, stamped at now,
// which the Worker sets to the time the input takes effect (Worker.InputAt:
// the End of a pass in flight, if any). A Worker fires due deadlines
// (FireDue) up to that time before applying any input, and up to now before
// any pass, so an input always sees every deadline up to its time already
// applied.
type Handoffs interface {
	// StartTransfer moves the SourceHeld request id to Transferring: its
	// abort and session deadlines are dropped and its release, with Outcome
	// Transferred, is due at now + the modeled transfer time of tokens
	// tokens. ok is false when id holds nothing or is already transferring.
	StartTransfer(now float64, id uint64, tokens int, events *[]Event) (delayMs float64, ok bool)
	// NextDeadline reports the earliest pending handoff deadline.
	NextDeadline() (at float64, ok bool)
	// FireDue applies every deadline at or before now, in deadline order,
	// each stamped at its own deadline; it reports whether any fired.
	FireDue(now float64, events *[]Event) bool
	// Reserve queues req as a destination waiting for remote KV; the
	// scheduler reserves its blocks (KV only, no sequence slot) when they
	// are available.
	Reserve(now float64, req Request, events *[]Event) error
	// Activate turns the reservation id into a running request whose prompt
	// is computed and whose first token came from the prefill side; false
	// when id is not reserved.
	Activate(now float64, id uint64, events *[]Event) bool
	// CancelDestination drops destination id, waiting or reserved, and frees
	// what it reserved; false when id is neither.
	CancelDestination(now float64, id uint64, events *[]Event) bool
}

// TransferTokens is the token count a transfer is charged for, to pass to
// StartTransfer: the whole prompt in TransferFullPrompt mode, and only the
// tokens the destination lacked (EventDecodeReserved.MissingTokens) in
// TransferDestinationMissing mode. The mode is the source worker's
// Args.KVTransferTimingMode.
func TransferTokens(mode TransferTimingMode, promptTokens, missingTokens int) int {
	if mode == TransferDestinationMissing {
		return missingTokens
	}
	return promptTokens
}

// holdReleaser is the hook a scheduler gives its handoffBook: free the KV
// of request id, whose hold the book has just ended at now, and forget the
// request. Freed blocks are a capacity change, so the scheduler may reserve
// waiting destinations there, appending their events to events.
type holdReleaser interface {
	freeHold(now float64, id uint64, events *[]Event)
}

type holdPhase uint8

const (
	phaseHeld holdPhase = iota + 1
	phaseTransferring
)

// holdRec is one source hold. It sits in a deadline heap while it has a
// deadline (idx ≥ 0): the earlier of its abort and session deadlines while
// SourceHeld (the contested heap: a claim stamped before it may still be on
// its way), its transfer completion while Transferring (the certain heap:
// no input moves it).
type holdRec struct {
	id       uint64
	at       float64 // the SourceHeld moment
	blocks   int
	phase    holdPhase
	deadline float64
	reason   EndReason // what the deadline ends the hold with
	seq      uint64    // ties on deadline fire in scheduling order
	idx      int       // position in heap, -1 when unscheduled
	heap     *deadlineHeap
}

type destRec struct {
	waitAt     float64
	reservedAt float64
	reserved   bool
	blocks     int
}

// handoffBook is the handoff bookkeeping both schedulers embed: source holds
// with their deadlines, and destinations from Reserve to activation. It
// emits the lifecycle events; the owning scheduler moves the KV.
type handoffBook struct {
	args      Args
	owner     holdReleaser
	abortMs   float64
	hasAbort  bool
	sessionMs float64 // ≤ 0: no session deadline

	holds idtab.Table[*holdRec]
	// contested holds the deadlines of SourceHeld holds, which a claim may
	// still pre-empt; certain those of transfers under way.
	contested deadlineHeap
	certain   deadlineHeap
	spare     spare.List[holdRec]
	seq       uint64

	transferring int

	dests          idtab.Table[destRec]
	reservedReqs   int
	reservedBlocks int
}

// setup readies the book for a scheduler built from args.
func (b *handoffBook) setup(args Args, owner holdReleaser) {
	b.args = args
	b.owner = owner
	if ms, ok := args.AbortTimeoutMs(); ok {
		b.abortMs, b.hasAbort = float64(ms), true
	}
	b.sessionMs = float64(args.HandoffSessionTimeoutMs)
}

// fillMetrics copies the book's counters into m.
func (b *handoffBook) fillMetrics(m *Metrics) {
	m.HeldRequests = b.holds.Len()
	m.TransferringRequests = b.transferring
	m.ReservedRequests = b.reservedReqs
	m.ReservedBlocks = b.reservedBlocks
	m.DynamoWaiting = m.Waiting + b.reservedReqs
	if b.args.DynamoCompat {
		// Dynamo's waiting_requests counts reserved destinations; under
		// dynamo_compat that is the figure Waiting reports.
		m.Waiting = m.DynamoWaiting
	}
}

// startHold records that request id became SourceHeld at `at` with blocks
// blocks, and starts its abort clock: the deadlines count from this moment,
// never from the request's arrival.
func (b *handoffBook) startHold(at float64, id uint64, blocks int, events *[]Event) {
	h := b.spare.Take()
	if h == nil {
		h = &holdRec{}
	}
	*h = holdRec{id: id, at: at, blocks: blocks, phase: phaseHeld, idx: -1}
	b.holds.Set(id, h)
	*events = append(*events, Event{Kind: EventHoldStarted, At: at, RequestID: id, Blocks: blocks})

	deadline, reason, ok := 0.0, EndReason(0), false
	if b.hasAbort {
		deadline, reason, ok = at+b.abortMs, EndAbortTimeout, true
	}
	if b.sessionMs > 0 && (!ok || at+b.sessionMs < deadline) {
		deadline, reason, ok = at+b.sessionMs, EndSessionTimeout, true
	}
	if ok {
		b.setDeadline(h, deadline, reason)
	}
}

// StartTransfer implements Handoffs for every scheduler that embeds the book.
func (b *handoffBook) StartTransfer(now float64, id uint64, tokens int, events *[]Event) (float64, bool) {
	h, ok := b.holds.Get(id)
	if !ok || h.phase != phaseHeld {
		return 0, false
	}
	delay := b.args.TransferDelayMs(tokens)
	h.phase = phaseTransferring
	b.transferring++
	b.setDeadline(h, now+delay, EndTransferComplete)
	*events = append(*events, Event{Kind: EventTransferStart, At: now, RequestID: id, Blocks: h.blocks,
		TransferTokens: max(0, tokens), DelayMs: delay, DurationMs: max(0, now-h.at)})
	return delay, true
}

// NextDeadline implements Handoffs.
func (b *handoffBook) NextDeadline() (float64, bool) {
	h := b.nextTimer()
	if h == nil {
		return 0, false
	}
	return h.deadline, true
}

// NextContested reports the earliest deadline a late input could still
// pre-empt: an abort or session deadline of a hold nobody has claimed yet.
// Transfer completions are left out, since no input moves them.
func (b *handoffBook) NextContested() (float64, bool) {
	if len(b.contested) == 0 {
		return 0, false
	}
	return b.contested[0].deadline, true
}

// holdStart reports when request id's hold began; false when id holds
// nothing.
func (b *handoffBook) holdStart(id uint64) (float64, bool) {
	h, ok := b.holds.Get(id)
	if !ok {
		return 0, false
	}
	return h.at, true
}

// nextTimer is the hold whose deadline comes first across both heaps, ties
// in scheduling order; nil when none has one.
func (b *handoffBook) nextTimer() *holdRec {
	switch {
	case len(b.contested) == 0 && len(b.certain) == 0:
		return nil
	case len(b.certain) == 0:
		return b.contested[0]
	case len(b.contested) == 0:
		return b.certain[0]
	}
	x, y := b.contested[0], b.certain[0]
	if y.deadline < x.deadline || y.deadline == x.deadline && y.seq < x.seq {
		return y
	}
	return x
}

// FireDue implements Handoffs.
func (b *handoffBook) FireDue(now float64, events *[]Event) bool {
	fired := false
	for {
		h := b.nextTimer()
		if h == nil || h.deadline > now {
			break
		}
		outcome := Aborted
		if h.phase == phaseTransferring {
			outcome = Transferred
		}
		b.endHold(h.deadline, h.id, outcome, h.reason, events)
		fired = true
	}
	return fired
}

// endHold ends request id's hold at now, emits EventHoldReleased and has
// the owner free the KV. False when id holds nothing: ending a hold twice
// is a no-op.
func (b *handoffBook) endHold(now float64, id uint64, outcome Outcome, reason EndReason, events *[]Event) bool {
	h, ok := b.holds.Get(id)
	if !ok {
		return false
	}
	h.unschedule()
	if h.phase == phaseTransferring {
		b.transferring--
	}
	b.holds.Delete(id)
	*events = append(*events, Event{Kind: EventHoldReleased, At: now, RequestID: id, Blocks: h.blocks,
		Outcome: outcome, Reason: reason, DurationMs: max(0, now-h.at)})
	b.spare.Put(h)
	b.owner.freeHold(now, id, events)
	return true
}

// waitStart records a destination waiting for remote KV.
func (b *handoffBook) waitStart(now float64, id uint64, events *[]Event) {
	b.dests.Set(id, destRec{waitAt: now})
	*events = append(*events, Event{Kind: EventDecodeWaitStart, At: now, RequestID: id})
}

// noteReserved records that the scheduler admitted destination id with
// blocks blocks, missing of its prompt tokens not already resident.
func (b *handoffBook) noteReserved(now float64, id uint64, blocks, missing int, events *[]Event) {
	d, _ := b.dests.Get(id)
	d.reserved, d.reservedAt, d.blocks = true, now, blocks
	b.dests.Set(id, d)
	b.reservedReqs++
	b.reservedBlocks += blocks
	*events = append(*events, Event{Kind: EventDecodeReserved, At: now, RequestID: id, Blocks: blocks,
		MissingTokens: missing, DurationMs: max(0, now-d.waitAt)})
}

// endDest forgets destination id. kind 0 records no event (the scheduler
// reports the end some other way, e.g. a Rejection).
func (b *handoffBook) endDest(now float64, id uint64, kind EventKind, events *[]Event) {
	d, ok := b.dests.Get(id)
	if !ok {
		return
	}
	b.dests.Delete(id)
	var since float64
	if d.reserved {
		b.reservedReqs--
		b.reservedBlocks -= d.blocks
		since = d.reservedAt
	} else {
		since = d.waitAt
	}
	if kind != 0 {
		*events = append(*events, Event{Kind: kind, At: now, RequestID: id, Blocks: d.blocks, DurationMs: max(0, now-since)})
	}
}

// setDeadline (re)schedules h's deadline in the heap its phase selects:
// contested while SourceHeld, certain while Transferring.
func (b *handoffBook) setDeadline(h *holdRec, deadline float64, reason EndReason) {
	h.deadline, h.reason = deadline, reason
	h.seq = b.seq
	b.seq++
	want := &b.certain
	if h.phase == phaseHeld {
		want = &b.contested
	}
	if h.idx >= 0 {
		if h.heap == want {
			want.fix(h.idx)
			return
		}
		h.heap.remove(h.idx)
	}
	want.push(h)
}

// unschedule takes h out of its deadline heap, if it is in one.
func (h *holdRec) unschedule() {
	if h.idx >= 0 {
		h.heap.remove(h.idx)
	}
}

// deadlineHeap is a min-heap of holds on (deadline, seq); each hold keeps
// its index and its heap so it can be moved or removed.
type deadlineHeap []*holdRec

func (q deadlineHeap) less(i, j int) bool {
	x, y := q[i], q[j]
	if x.deadline != y.deadline {
		return x.deadline < y.deadline
	}
	return x.seq < y.seq
}

func (q deadlineHeap) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx = i
	q[j].idx = j
}

func (q *deadlineHeap) push(h *holdRec) {
	h.idx, h.heap = len(*q), q
	*q = append(*q, h)
	q.up(h.idx)
}

func (q deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q deadlineHeap) down(i int) bool {
	moved := false
	n := len(q)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			return moved
		}
		q.swap(i, m)
		i = m
		moved = true
	}
}

func (q deadlineHeap) fix(i int) {
	if !q.down(i) {
		q.up(i)
	}
}

func (q *deadlineHeap) remove(i int) {
	old := *q
	n := len(old) - 1
	h := old[i]
	if i != n {
		old.swap(i, n)
	}
	old[n] = nil
	*q = old[:n]
	h.idx, h.heap = -1, nil
	if i != n {
		q.fix(i)
	}
}
