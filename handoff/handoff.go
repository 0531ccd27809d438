// Package handoff is the lifecycle of one request across its workers, as a
// pure state machine: a Machine takes typed events (what a worker reported,
// what an input it was given replied, what the transfer server answered,
// the caller giving up) and returns actions (inputs for a worker,
// transfer-room steps, the end of the request), each an Action value whose
// Kind says which, so that stepping a machine allocates nothing of its
// own. It starts no goroutine, reads no clock and does no I/O, so the
// cluster's loop, a test transcript or a distributed transport can drive
// it alike; it is the one place to read how a request crosses from a
// prefill worker to a decode worker.
//
// # Orders
//
// Aggregated: one worker runs the request and frees its KV.
//
// SourceFirst (vLLM, and SGLang with optimistic_prefill): the prefill
// computes the prompt and the first token and holds the KV (Held; its abort
// clock starts); the machine opens a transfer room and asks the decode to
// reserve. Once reserved, the decode connects to the source's transfer
// server (Connect); the server's cue that it arrived (DecodeArrived) starts
// the modeled transfer (StartTransfer), whose end releases the hold as
// transferred; the room is closed with that outcome (CloseRoom), the
// server answers ACK, and the decode activates and generates the rest. If
// the abort (or session) deadline ends the hold first, the room is closed
// as aborted, the server answers ABORT whenever the decode connects, the
// decode frees its reservation, and the request ends Aborted.
//
// DestinationFirst (SGLang): the request reaches both workers at once; the
// prefill waits in its bootstrap queue holding nothing while the decode
// reserves; the reservation readies the prefill (DestinationReady), which
// computes and holds, and its transfer starts with the hold (the engine
// starts it). The decode connects as the hold starts and waits for the
// outcome. A decode that cannot reserve within the session timeout leaves
// the prefill to be dropped from its bootstrap queue: Rejected, with
// nothing computed or held.
//
// DecodeLater (source-first, P/D driven from outside): the decode is not
// named at the start. Once the prefill holds and its first token is out,
// the machine asks the driver to hand the transfer's params out (HandOut)
// and waits; a Claim names the decode, and from there the request goes on
// as source-first does (reserve, connect, transfer, ACK). A hold no Claim
// reaches ends at its deadline, the room is closed as aborted (a late
// decode is answered ABORT), and the request ends Aborted.
//
// Whatever the path, the machine finishes a request only once its prefill
// worker is done with it (the hold ended, or it was refused or withdrawn
// there), so a finished record always carries the hold's final outcome.
package handoff

import (
	"fmt"

	"github.com/kvstrand/mocker/engine"
)

// Order is how a request's work is split across workers.
type Order uint8

// The orders a Machine runs.
const (
	Aggregated Order = iota
	SourceFirst
	DestinationFirst
)

func (o Order) String() string {
	switch o {
	case Aggregated:
		return "aggregated"
	case SourceFirst:
		return "source-first"
	case DestinationFirst:
		return "destination-first"
	}
	return "unknown"
}

// Phase is where a request is in its lifecycle.
type Phase uint8

// Phases, in the order a request goes through them (a request skips those
// its order does not have).
const (
	Routed           Phase = iota // routed, nothing sent yet
	PrefillQueued                 // submitted to the prefill (or only) worker
	BootstrapWaiting              // destination-first: the prefill waits for its decode to reserve
	Held                          // the prefill holds the KV; the decode waits to reserve
	Reserved                      // the decode reserved and is connecting to the source
	Transferring                  // the modeled transfer runs
	Activated                     // the decode generates the rest
	Completed                     // terminal
	Aborted                       // terminal: the hold ended by its deadline
	Rejected                      // terminal: refused for capacity or a handoff timeout
	Errored                       // terminal: anything else (bad input, withdrawn, caller gave up)
)

var phaseNames = [...]string{"routed", "prefill_queued", "bootstrap_waiting", "held", "reserved",
	"transferring", "activated", "completed", "aborted", "rejected", "error"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// Terminal reports whether p ends the request.
func (p Phase) Terminal() bool { return p >= Completed }

// Side names a worker of the request. Aggregated requests use Prefill for
// their one worker.
type Side uint8

// The two sides of a handoff.
const (
	Prefill Side = iota
	Decode
)

func (s Side) String() string {
	if s == Decode {
		return "decode"
	}
	return "prefill"
}

// Status is the transfer server's answer to the decode.
type Status uint8

// The answers, as the wire protocol has them.
const (
	ACK Status = iota + 1
	Abort
	Error
)

// Event is something that happened to the request. The set is closed.
type Event interface{ isEvent() }

// Start begins the request: the router has placed it.
type Start struct{}

// WorkerEvent is a lifecycle event a worker reported for the request.
type WorkerEvent struct {
	Side  Side
	Event engine.Event
}

// WorkerCompletion is a worker's completion of the request (on a prefill
// worker: the prefill and first token, held or not).
type WorkerCompletion struct {
	Side       Side
	Completion engine.Completion
}

// WorkerRejection is a worker refusing the request.
type WorkerRejection struct {
	Side      Side
	Rejection engine.Rejection
}

// InputReply is what an input the machine asked for did.
type InputReply struct {
	Side  Side
	Input engine.Input
	Reply engine.Reply
}

// DecodeArrived is the source's transfer server seeing the decode's
// connection for this request's room.
type DecodeArrived struct{}

// TransferStatus is the server's answer as the decode received it. Err
// describes an Abort or Error answer (or a connection failure, with Error).
type TransferStatus struct {
	Status Status
	Err    string
}

// Stop is the caller giving up (a cancelled context, the cluster closing).
type Stop struct{ Reason string }

// Claim names the decode of a request whose Spec.DecodeLater left it
// unnamed, once the machine has handed its transfer out (HandOut): the
// decode worker (for messages) and how many tokens it is to generate (0
// keeps the request's own max_tokens). A Claim the machine cannot take
// (Claimable is false) does nothing.
type Claim struct {
	DecodeName string
	MaxTokens  int
}

func (Start) isEvent()            {}
func (WorkerEvent) isEvent()      {}
func (WorkerCompletion) isEvent() {}
func (WorkerRejection) isEvent()  {}
func (InputReply) isEvent()       {}
func (DecodeArrived) isEvent()    {}
func (TransferStatus) isEvent()   {}
func (Stop) isEvent()             {}
func (Claim) isEvent()            {}

// Action is something the driver must do now: Kind says what, and the
// fields that kind uses say the rest. It is a plain value, not an
// interface, so that a Step boxes nothing: the machine's actions cost a
// request no allocation of their own.
type Action struct {
	Kind ActionKind
	// Side and Input are Apply's: hand Input to the worker on Side. A
	// Submit or Reserve points into the machine, and stays as it is until
	// Init makes the machine another request's: a driver that reuses
	// machines does so only once their inputs have been applied.
	// Transferred is CloseRoom's: how the hold ended. Phase and Error are
	// Finish's: Phase is terminal, Error says why when it is not
	// Completed. (The small fields come first: an Action is 40 bytes.)
	Side        Side
	Transferred bool
	Phase       Phase
	Input       engine.Input
	Error       string
}

// ActionKind is what an Action asks of the driver. The set is closed.
type ActionKind uint8

// The actions.
const (
	// Apply hands Input to the worker on Side.
	Apply ActionKind = iota + 1
	// OpenRoom opens a transfer room on the source's server for this
	// request.
	OpenRoom
	// Connect makes the decode connect to the source's transfer server and
	// wait for its answer; the driver reports DecodeArrived (when the
	// server sees it) and then TransferStatus.
	Connect
	// CloseRoom tells the source's server how the hold ended: ACK to the
	// decode when Transferred, ABORT otherwise.
	CloseRoom
	// Finish ends the request with Phase and Error. The machine's Record is
	// final.
	Finish
	// HandOut (Spec.DecodeLater only) says the source holds the KV, its
	// room is open and its first token is out, and no decode is named:
	// the driver gives the transfer's params to whoever will name one,
	// with Claim. Until then the hold's abort clock runs.
	HandOut
)

var actionNames = [...]string{Apply: "apply", OpenRoom: "open_room", Connect: "connect", CloseRoom: "close_room", Finish: "finish", HandOut: "hand_out"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && actionNames[k] != "" {
		return actionNames[k]
	}
	return "unknown"
}

// apply is the Action handing in to the worker on side.
func apply(side Side, in engine.Input) Action { return Action{Kind: Apply, Side: side, Input: in} }

// Spec is what a Machine knows of its request and workers.
type Spec struct {
	Order   Order
	Request engine.Request
	// PrefillName and DecodeName name the workers in messages (aggregated:
	// both the one worker).
	PrefillName, DecodeName string
	// TransferMode is the source's kv_transfer_timing_mode; with
	// destination_missing the transfer moves the destination's missing
	// tokens, which the engine reports in whole blocks.
	TransferMode engine.TransferTimingMode
	// SessionTimeoutMs is the source's handoff_session_timeout_ms, for the
	// message of a destination-first timeout.
	SessionTimeoutMs int64
	// DecodeLater (source-first only) leaves the decode unnamed: once the
	// prefill holds, the machine hands the transfer out (HandOut) and
	// waits for a Claim naming the decode, as a vLLM prefill with
	// do_remote_decode waits for whichever decode an outside router sends
	// its params to. A hold nobody claims ends at its deadline, and the
	// request with it, Aborted.
	DecodeLater bool
}

// Record is what the machine learned of the request, for its result.
//
// The flags come last, together: a machine is kept for each request in
// flight, a long queue's worth of them in an overloaded run.
type Record struct {
	Arrival, FirstTokenAt float64
	// QueueMs is the first token's worker's Completion.QueueMs.
	QueueMs            float64
	HoldStart, HoldEnd float64
	HoldMs             float64
	TransferMs         float64
	WaitStart          float64
	ReservedAt         float64
	DecodeWaitMs       float64
	// DoneAt, OutputTokens, PromptTokens and Truncated are the final
	// completion's At, counts and flag, once Done.
	DoneAt    float64
	Rejection *engine.Rejection
	// Token counts fit in 32 bits: the cluster takes prompts of up to 2^22
	// tokens and outputs of up to 2^24 (cluster.MaxPromptTokens,
	// MaxRequestMaxTokens).
	CachedTokens               int32
	Missing                    int32
	OutputTokens, PromptTokens int32
	HoldOutcome                engine.Outcome
	HoldReason                 engine.EndReason
	// RejectedBy is the side that refused the request, when one did.
	RejectedBy      Side
	PrefillDone     bool
	Held, HoldEnded bool
	Claimed         bool // the transfer started
	WaitSeen        bool
	Reserved        bool
	Done            bool
	Truncated       bool
}

// done records the final completion c.
func (r *Record) done(c engine.Completion) {
	r.Done, r.DoneAt, r.Truncated = true, c.At, c.Truncated
	r.OutputTokens, r.PromptTokens = int32(c.OutputTokens), int32(c.PromptTokens)
}

// params is what the machine keeps of its Spec besides the request, which
// is in its Submit, and the order and transfer mode, which are among its
// flags.
type params struct {
	PrefillName, DecodeName string
	SessionTimeoutMs        int64
}

// Machine is one request's lifecycle. The zero value is not usable; build
// it with New.
type Machine struct {
	spec params
	rec  Record

	order         Order
	missingOnly   bool // the transfer moves the destination's missing tokens
	phase         Phase
	submitted     bool // the prefill (or only) worker got the request
	prefillEnded  bool // ... and is done with it
	reservePosted bool
	connected     bool
	cleaned       bool
	pending       bool // endPhase and endErr are the Finish's, waiting for the prefill to be done
	awaitClaim    bool // DecodeLater: no decode named yet
	handedOut     bool // ... and HandOut was emitted
	finished      bool
	endPhase      Phase
	endErr        string
	// out is the caller's slice during a Step, which the actions are
	// appended to: a driver that steps many machines keeps one slice,
	// warm in cache, for all their actions.
	out *[]Action
	// submit and reserve are the Submit and Reserve the machine hands its
	// workers, which go by pointer (engine.Input): kept here, handing one
	// in allocates nothing. submit holds the request from Init on; in a
	// handoff, reserve holds it whole from Start on and submit asks the
	// prefill side for one token.
	submit  engine.Submit
	reserve engine.Reserve
}

// req is the machine's request.
func (m *Machine) req() *engine.Request { return &m.submit.Request }

// submitInput is the request's Submit with policy p.
func (m *Machine) submitInput(p engine.CompletionPolicy) *engine.Submit {
	m.submit.Policy = p
	return &m.submit
}

// reserveInput is the request's Reserve, the whole request as Start kept
// it.
func (m *Machine) reserveInput() *engine.Reserve {
	return &m.reserve
}

// New builds the machine of one request, in phase Routed.
func New(spec Spec) *Machine {
	m := new(Machine)
	m.Init(spec)
	return m
}

// Init makes m the machine of a new request, in phase Routed, as New
// does, for a driver that keeps each machine inside its own record of the
// request.
func (m *Machine) Init(spec Spec) {
	*m = Machine{submit: engine.Submit{Request: spec.Request}, order: spec.Order,
		missingOnly: spec.TransferMode == engine.TransferDestinationMissing,
		awaitClaim:  spec.DecodeLater && spec.Order == SourceFirst}
	m.spec = params{PrefillName: spec.PrefillName, DecodeName: spec.DecodeName, SessionTimeoutMs: spec.SessionTimeoutMs}
}

// Phase is where the request is.
func (m *Machine) Phase() Phase { return m.phase }

// Record is what the machine learned so far.
func (m *Machine) Record() *Record { return &m.rec }

// Finished reports whether the machine has emitted its Finish.
func (m *Machine) Finished() bool { return m.finished }

// Claimable reports whether a Claim would name the request's decode now:
// the transfer was handed out, nobody claimed it yet, and the hold has
// neither ended nor been given up.
func (m *Machine) Claimable() bool {
	return m.awaitClaim && m.handedOut && !m.pending && !m.finished && !m.rec.HoldEnded
}

// handOut emits HandOut once a DecodeLater source both holds and has
// reported its first token, whichever came last.
func (m *Machine) handOut() {
	if m.awaitClaim && !m.handedOut && !m.pending && m.rec.Held && m.rec.PrefillDone && !m.rec.HoldEnded {
		m.handedOut = true
		m.emit(Action{Kind: HandOut})
	}
}

// Step applies one event and appends the actions it calls for, in order,
// to *dst, which must not be nil. A driver that steps many machines keeps
// one slice for all their actions and passes its address.
func (m *Machine) Step(ev Event, dst *[]Action) {
	if m.finished {
		return
	}
	m.out = dst
	switch m.order {
	case Aggregated:
		m.stepAggregated(ev)
	default:
		m.stepHandoff(ev)
	}
	m.settle()
	m.out = nil
}

func (m *Machine) emit(a Action) { *m.out = append(*m.out, a) }

// finish ends the request with phase, once the prefill is done with it.
func (m *Machine) finish(phase Phase, err string) {
	if !m.pending {
		m.endPhase, m.endErr = phase, err
		m.pending = true
	}
}

func (m *Machine) settle() {
	if m.pending && !m.finished && (!m.submitted || m.prefillEnded) {
		m.finished = true
		m.phase = m.endPhase
		m.emit(Action{Kind: Finish, Phase: m.endPhase, Error: m.endErr})
	}
}

func (m *Machine) stepAggregated(ev Event) {
	s := &m.spec
	switch ev := ev.(type) {
	case Start:
		m.phase = PrefillQueued
		m.submitted = true
		m.emit(apply(Prefill, m.submitInput(engine.Release)))
	case InputReply:
		if _, ok := ev.Input.(*engine.Submit); ok && ev.Reply.Err != nil {
			m.prefillEnded = true
			m.finish(Errored, fmt.Sprintf("submit to %s: %v", s.PrefillName, ev.Reply.Err))
		}
		if _, ok := ev.Input.(engine.Cancel); ok && !ev.Reply.OK {
			m.prefillEnded = true
		}
	case WorkerCompletion:
		c := ev.Completion
		m.rec.Arrival, m.rec.FirstTokenAt, m.rec.CachedTokens = c.Arrival, c.FirstTokenAt, int32(c.CachedTokens)
		m.rec.QueueMs = c.QueueMs
		m.rec.PrefillDone = true
		m.rec.done(c)
		m.prefillEnded = true
		m.finish(Completed, "")
	case WorkerRejection:
		m.reject(ev)
		m.prefillEnded = true
		m.finish(Rejected, ev.Rejection.Reason)
	case WorkerEvent:
		if ev.Event.Kind == engine.EventCancelled {
			m.prefillEnded = true
			m.finish(Errored, "withdrawn by "+s.PrefillName)
		}
	case Stop:
		m.finish(Errored, ev.Reason)
		if !m.cleaned {
			m.cleaned = true
			m.emit(apply(Prefill, engine.Cancel{ID: m.req().ID}))
		}
	}
}

func (m *Machine) reject(ev WorkerRejection) {
	rej := ev.Rejection
	m.rec.Rejection, m.rec.RejectedBy = &rej, ev.Side
}

// transferTokens is the size of the transfer the source models.
func (m *Machine) transferTokens() int {
	mode := engine.TransferFullPrompt
	if m.missingOnly {
		mode = engine.TransferDestinationMissing
	}
	return engine.TransferTokens(mode, m.req().PromptLen(), int(m.rec.Missing))
}

// cleanup withdraws the request from both workers: a prefill that holds KV
// releases it as aborted (the room is then closed as aborted), one still
// queued is dropped, and a destination is freed.
func (m *Machine) cleanup() {
	if m.cleaned {
		return
	}
	m.cleaned = true
	id := m.req().ID
	if m.submitted && !m.prefillEnded {
		m.emit(apply(Prefill, engine.Cancel{ID: id}))
	}
	if m.reservePosted {
		m.emit(apply(Decode, engine.CancelDestination{ID: id}))
		m.emit(apply(Decode, engine.Cancel{ID: id}))
	}
}

// fail cleans up and ends the request once the prefill is done.
func (m *Machine) fail(phase Phase, err string) {
	m.cleanup()
	m.finish(phase, err)
}

func (m *Machine) stepHandoff(ev Event) {
	s := &m.spec
	id := m.req().ID
	switch ev := ev.(type) {
	case Start:
		// The decode side generates the answer; the prefill side is asked
		// for its first token only, as Dynamo's frontend asks. A prefill
		// worker stops there anyway unless dynamo_compat has it generate
		// what it is asked for.
		m.reserve.Request = m.submit.Request
		m.submit.Request.MaxTokens = 1
		m.submitted = true
		m.emit(apply(Prefill, m.submitInput(engine.Hold)))
		if m.order == DestinationFirst {
			m.phase = BootstrapWaiting
			m.reservePosted = true
			m.emit(apply(Decode, m.reserveInput()))
		} else {
			m.phase = PrefillQueued
		}

	case InputReply:
		m.onReply(ev)

	case WorkerEvent:
		m.onEvent(ev.Side, ev.Event)

	case WorkerCompletion:
		c := ev.Completion
		if ev.Side == Prefill {
			m.rec.PrefillDone = true
			m.rec.Arrival, m.rec.FirstTokenAt, m.rec.CachedTokens = c.Arrival, c.FirstTokenAt, int32(c.CachedTokens)
			m.rec.QueueMs = c.QueueMs
			if !c.Held {
				m.prefillEnded = true
				m.fail(Errored, fmt.Sprintf("prefill on %s ended without holding KV", s.PrefillName))
				return
			}
			m.handOut()
			return
		}
		m.rec.done(c)
		m.finish(Completed, "")

	case WorkerRejection:
		m.reject(ev)
		if ev.Side == Prefill {
			m.prefillEnded = true
			if ev.Rejection.Code == engine.RejectHandoffTimeout && m.order == DestinationFirst {
				// The bootstrap wait timed out before the decode reserved (a
				// DestinationReady after it finds nothing to ready).
				m.emit(apply(Decode, engine.CancelDestination{ID: id}))
				m.cleaned = true
				m.finish(Rejected, fmt.Sprintf("handoff timeout: %s reserved no room within handoff_session_timeout_ms %d, so the prefill on %s was dropped from its bootstrap queue having computed and held nothing",
					s.DecodeName, s.SessionTimeoutMs, s.PrefillName))
				return
			}
		}
		if m.phase == Activated {
			m.fail(Errored, "withdrawn by "+s.DecodeName)
			return
		}
		m.fail(Rejected, ev.Rejection.Reason)

	case DecodeArrived:
		// Source-first: the decode's arrival is the source's cue to start
		// the transfer, stamped at the reservation (the driver holds the
		// loop there until the cue comes back). Destination-first: the
		// engine started it with the hold.
		if m.order == SourceFirst && m.phase == Reserved && !m.rec.HoldEnded {
			m.emit(apply(Prefill, engine.StartTransfer{ID: id, Tokens: m.transferTokens()}))
		}

	case TransferStatus:
		switch ev.Status {
		case ACK:
			m.phase = Activated
			m.emit(apply(Decode, engine.Activate{ID: id}))
		case Abort:
			m.cleaned = true
			m.emit(apply(Decode, engine.CancelDestination{ID: id}))
			m.finish(Aborted, ev.Err)
		default:
			m.cleanup()
			if m.rec.HoldEnded && m.rec.HoldOutcome == engine.Aborted {
				// A refusal after the source aborted (its tombstone
				// expired) is still an abort.
				m.finish(Aborted, ev.Err)
				return
			}
			m.finish(Errored, ev.Err)
		}

	case Stop:
		m.fail(Errored, ev.Reason)

	case Claim:
		if !m.Claimable() {
			return
		}
		m.awaitClaim = false
		if ev.DecodeName != "" {
			s.DecodeName = ev.DecodeName
		}
		if ev.MaxTokens > 0 {
			m.reserve.Request.MaxTokens = ev.MaxTokens
		}
		m.reservePosted = true
		m.emit(apply(Decode, m.reserveInput()))
	}
}

// holdDeadline names the deadline that ended a hold.
func holdDeadline(r engine.EndReason) string {
	if r == engine.EndSessionTimeout {
		return "session deadline (handoff_session_timeout_ms)"
	}
	return "abort timeout (kv_transfer_abort_timeout_ms)"
}

func (m *Machine) onReply(ev InputReply) {
	s := &m.spec
	switch ev.Input.(type) {
	case *engine.Submit:
		if ev.Reply.Err != nil {
			m.prefillEnded = true
			m.fail(Errored, fmt.Sprintf("submit to %s: %v", s.PrefillName, ev.Reply.Err))
		}
	case *engine.Reserve:
		if ev.Reply.Err != nil {
			m.reservePosted = false
			m.fail(Errored, fmt.Sprintf("reserve on %s: %v", s.DecodeName, ev.Reply.Err))
		}
	case engine.Cancel:
		if ev.Side == Prefill && !ev.Reply.OK {
			m.prefillEnded = true // unknown there: nothing left to end
		}
	case engine.Activate:
		if !ev.Reply.OK {
			m.fail(Errored, fmt.Sprintf("activate on %s: reservation gone", s.DecodeName))
		}
	}
}

func (m *Machine) onEvent(side Side, e engine.Event) {
	s := &m.spec
	id := m.req().ID
	switch e.Kind {
	case engine.EventHoldStarted:
		m.rec.Held, m.rec.HoldStart = true, e.At
		m.emit(Action{Kind: OpenRoom})
		if m.pending {
			// Given up while the pass that started the hold was in
			// flight: the cancellation ends the hold at the pass's end,
			// and no decode is asked for.
			return
		}
		if m.order == DestinationFirst {
			// The transfer starts with the hold; the decode connects now
			// and waits for the outcome.
			m.phase = Transferring
			m.connected = true
			m.emit(Action{Kind: Connect})
			return
		}
		m.phase = Held
		if m.awaitClaim {
			m.handOut() // the decode is named later, by a Claim
			return
		}
		m.reservePosted = true
		m.emit(apply(Decode, m.reserveInput()))
	case engine.EventHoldReleased:
		m.rec.HoldEnded, m.rec.HoldOutcome, m.rec.HoldReason = true, e.Outcome, e.Reason
		m.rec.HoldMs, m.rec.HoldEnd = e.DurationMs, e.At
		m.prefillEnded = true
		m.emit(Action{Kind: CloseRoom, Transferred: e.Outcome == engine.Transferred})
		if m.awaitClaim && !m.pending {
			// No decode was ever named: nobody will connect to learn of
			// the abort, so the request ends here.
			if e.Reason == engine.EndAbortTimeout || e.Reason == engine.EndSessionTimeout {
				m.finish(Aborted, fmt.Sprintf("no decode claimed the KV %s held for %.0f modeled ms before its %s",
					s.PrefillName, e.DurationMs, holdDeadline(e.Reason)))
			} else {
				m.finish(Errored, fmt.Sprintf("the hold on %s ended before any decode claimed it", s.PrefillName))
			}
		}
	case engine.EventTransferStart:
		m.rec.Claimed, m.rec.TransferMs = true, e.DelayMs
		if m.phase < Transferring {
			m.phase = Transferring
		}
	case engine.EventDecodeWaitStart:
		m.rec.WaitSeen, m.rec.WaitStart = true, e.At
	case engine.EventDecodeReserved:
		m.rec.Reserved, m.rec.ReservedAt, m.rec.Missing, m.rec.DecodeWaitMs = true, e.At, int32(e.MissingTokens), e.DurationMs
		if m.order == DestinationFirst {
			if !m.pending {
				m.phase = PrefillQueued
				m.emit(apply(Prefill, engine.DestinationReady{ID: id, Tokens: m.transferTokens()}))
			}
			return
		}
		if !m.pending && !m.connected {
			m.phase = Reserved
			m.connected = true
			m.emit(Action{Kind: Connect})
		}
	case engine.EventDestinationCancelled:
		if !m.pending && !m.cleaned {
			m.reservePosted = false
			m.fail(Errored, "reservation withdrawn by "+s.DecodeName)
		}
	case engine.EventCancelled:
		if side == Prefill {
			m.prefillEnded = true
			if !m.pending {
				m.fail(Errored, "withdrawn by "+s.PrefillName)
			}
			return
		}
		if !m.pending && !m.cleaned {
			m.fail(Errored, "withdrawn by "+s.DecodeName)
		}
	}
}
