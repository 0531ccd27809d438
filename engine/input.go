package engine

// Input is one thing a driver tells a Worker, in the manner of raft's
// single Step(Message): a new kind of input is a new type here, not a new
// method on every driver. Worker.Apply takes any of them with the modeled
// time it happens at; the set is closed (the method is unexported).
//
// Submit and Reserve, which carry a whole request, are inputs by pointer
// (*Submit, *Reserve): a driver that keeps one per request hands it in
// without a copy, where a value would be copied into an allocation of its
// own. The worker reads it when the input is applied; until then the
// caller must leave it unchanged (a driver that schedules it for later,
// Virtual.Schedule, included). The others are small values.
type Input interface {
	isInput()
}

// Submit queues a request (aggregated work, or a disaggregated prefill
// with Policy Hold).
type Submit struct {
	Request Request
	Policy  CompletionPolicy
}

// ReleaseHeld ends a hold with Outcome (Transferred or Aborted);
// idempotent.
type ReleaseHeld struct {
	ID      uint64
	Outcome Outcome
}

// Cancel withdraws a waiting, running or held request.
type Cancel struct{ ID uint64 }

// StartTransfer is the decode side claiming a held request's KV for a
// transfer of Tokens tokens (see TransferTokens).
type StartTransfer struct {
	ID     uint64
	Tokens int
}

// Reserve makes a request a handoff destination waiting for remote KV.
type Reserve struct{ Request Request }

// Activate turns a reserved destination into a running request: the
// transfer's acknowledgement.
type Activate struct{ ID uint64 }

// CancelDestination drops a destination, waiting or reserved.
type CancelDestination struct{ ID uint64 }

// DestinationReady tells a destination-first source that its decode has
// reserved: the prefill leaves the bootstrap queue, and its transfer of
// Tokens tokens starts the moment its KV is held.
type DestinationReady struct {
	ID     uint64
	Tokens int
}

func (*Submit) isInput()           {}
func (ReleaseHeld) isInput()       {}
func (Cancel) isInput()            {}
func (StartTransfer) isInput()     {}
func (*Reserve) isInput()          {}
func (Activate) isInput()          {}
func (CancelDestination) isInput() {}
func (DestinationReady) isInput()  {}

// Reply is what an Input did. Err is set for a Submit or Reserve the worker
// refused (an empty prompt, a known id, no handoff support); OK says
// whether an input that targets a request took effect (false: the request
// was not in the state the input needs, and nothing changed). DelayMs is a
// StartTransfer's time from the input to the transfer's end.
type Reply struct {
	OK      bool
	Err     error
	DelayMs float64
}

// Apply hands in to the worker at modeled time at and says what it did.
// The rules of the input's method apply: an input that targets a request a
// pass in flight touches takes effect at the pass's End (InputAt), Submit
// and Reserve at once.
func (w *Worker) Apply(at float64, in Input) Reply {
	switch in := in.(type) {
	case *Submit:
		err := w.Submit(at, in.Request, in.Policy)
		return Reply{OK: err == nil, Err: err}
	case *Reserve:
		err := w.Reserve(at, in.Request)
		return Reply{OK: err == nil, Err: err}
	case ReleaseHeld:
		return Reply{OK: w.ReleaseHeld(at, in.ID, in.Outcome)}
	case Cancel:
		return Reply{OK: w.Cancel(at, in.ID)}
	case StartTransfer:
		d, ok := w.StartTransfer(at, in.ID, in.Tokens)
		return Reply{OK: ok, DelayMs: d}
	case Activate:
		return Reply{OK: w.Activate(at, in.ID)}
	case CancelDestination:
		return Reply{OK: w.CancelDestination(at, in.ID)}
	case DestinationReady:
		return Reply{OK: w.DestinationReady(at, in.ID, in.Tokens)}
	}
	return Reply{}
}
