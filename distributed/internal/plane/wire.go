package plane

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/kv"
)

// The request plane between the router and a worker is ours (Dynamo's
// request framing is between its own peers and may differ): sealed
// MessagePack (seal.go, codec.go) on two NATS subjects per worker, both in
// the registration.
//
//	mocker.{ns}.{instance:x}.cmd   router → worker: the commands of one router turn per message
//	mocker.{ns}.{instance:x}.out   worker → routers: one frame per loop turn
//
// A command is an engine input or a transfer-room step; a frame is what
// the worker's loop produced since the previous frame, in order (pass
// outputs, input replies, room answers). Times in a frame are the
// worker's modeled ms; its registration carries the wall instant of its
// modeled 0, which maps them onto the router's clock.
//
// Core NATS delivers at most once: a message published while the other
// side is not subscribed (a NATS restart, a reconnect) is gone. On top of
// it both directions are made reliable, applied exactly once and in order,
// without JetStream:
//
//   - Commands. Each router keeps one session per worker it joined (a
//     random id) and numbers that session's commands from 1 (Session,
//     Seq), the first being OpHello. The worker applies a session's commands in Seq order exactly
//     once: a duplicate is dropped, one ahead of a gap is held until the
//     gap fills. Its frames acknowledge the highest Seq applied per
//     session (Acks); a duplicate, or an ack no frame carried within
//     AckDelay, gets a control frame of its own. The router keeps every command
//     until it is acknowledged and publishes them all again, in order,
//     when its NATS connection comes back and whenever the oldest has
//     waited RetransmitAfter.
//   - Frames. The worker numbers its frames (Seq) for all routers alike
//     and keeps the last ones it sent (frameBuffer). A router applies
//     them in Seq order exactly once from the first frame that carries
//     its session's work (the From of its session's ack), holding later
//     ones until a gap fills. It acknowledges the next Seq it expects on
//     every command (Ack; an ack-only command when it has nothing else to
//     say), and asks for a resend from that Seq (OpResend) on a gap, after
//     its own reconnect, and when the worker's Head says frames are
//     missing. A worker whose routers have not acknowledged its latest
//     frame tells them its Head in a control frame every HeartbeatEvery,
//     so a lost last frame is noticed. Control frames (no Items) are not
//     numbered.
//   - Only when the worker can no longer resend (the frames fell out of
//     its buffer) does the router give the worker up: its requests end
//     "error" saying that frames were lost, the session ends (OpBye: the
//     worker withdraws what it still runs for it), and the worker joins
//     again under a new session. A worker that goes away is etcd's
//     business, and so is a router that does: each hello names its
//     router (Router, the router's lease id), and a worker withdraws the
//     requests of every session of a router whose key in etcd is gone.
//
// Every message is sealed (seal.go), a router's commands to a worker in
// one turn of its loop together (codec.go, AppendCommand): a command with no
// session, or one whose message fails its seal, is dropped and counted.
//
// A coupled session is one whose router drives the worker's clock
// instead of the wall clock (OpHello with Coupled): the worker starts a
// fresh engine at the hello's At, on the router's modeled clock, and its
// time moves only as the session's commands say (its transfer server
// forgets earlier rooms, so the session's ids may start at 1). Each
// command takes effect at its At, after the engine's events before that
// instant and ahead of those at it; OpRun runs the engine until Until,
// the events at Until that were queued when it came included (what they
// queue there is the router's next run). The worker answers each with a
// numbered frame carrying what they produced, the last Turn it applied
// and the time of its next event that does something. The router orders
// the commands and runs of one instant as one event queue would, so the
// results are the in-process cluster's. They depend on the commands
// alone, not on when they reach the worker: a router that lets modeled
// time pass only once each turn is answered gets the same results on any
// host. A coupled
// worker serves that session alone; a hello it cannot take (work in
// flight, another coupled router) is answered with Refused.

// Command ops.
const (
	OpSubmit            = "submit"
	OpReserve           = "reserve"
	OpReleaseHeld       = "release_held"
	OpCancel            = "cancel"
	opStartTransfer     = "start_transfer"
	opActivate          = "activate"
	OpCancelDestination = "cancel_destination"
	opDestinationReady  = "destination_ready"
	OpOpenRoom          = "open_room"
	OpConnect           = "connect"
	// Control commands: not numbered, never acknowledged.
	OpAck    = "ack"    // carries only Ack
	OpResend = "resend" // republish frames from From on
	OpBye    = "bye"    // the router's session ended; forget it
	// OpHello is a session's first numbered command: its ack tells the
	// router where the session's frames start.
	OpHello = "hello"
	// OpRun is a coupled session's numbered command to run the engine
	// until Until and report.
	OpRun = "run"
)

// Command is one router → worker message.
type Command struct {
	Op string
	// Session and Seq number the command in its router's stream to this
	// worker; Ack is the next frame Seq the router expects (it has every
	// frame before it); From is where OpResend starts.
	Session   uint64
	Seq       uint64
	Router    int64 // hello: the router's lease id
	Ack       uint64
	From      uint64
	ID        uint64
	Tokens    []uint32
	MaxTokens int
	Priority  int
	Hold      bool  // submit: the Hold policy
	Outcome   uint8 // release_held
	N         int   // start_transfer, destination_ready: tokens
	// Transfer-room steps.
	TID    uint64
	Params json.RawMessage
	// Coupled sessions: Coupled (hello) asks the worker to run on the
	// router's clock; At is the modeled instant a command takes effect
	// (hello: where the fresh engine's clock starts), Until how far
	// OpRun runs, and Turn numbers what the worker's answer acknowledges.
	Coupled bool
	At      float64
	Until   float64
	Turn    uint64
}

// CommandOf is the command carrying an engine input to a remote worker.
// The wire carries a request's whole prompt: a request that leaves tokens
// out (engine.Request.Skip) cannot cross a process, and passing one is a
// bug of the caller's, so it panics rather than lose the tokens.
func CommandOf(in engine.Input) Command {
	switch in := in.(type) {
	case *engine.Submit:
		r := in.Request
		mustCarryWholePrompt(r)
		return Command{Op: OpSubmit, ID: r.ID, Tokens: r.Tokens, MaxTokens: r.MaxTokens, Priority: r.Priority, Hold: in.Policy == engine.Hold}
	case *engine.Reserve:
		r := in.Request
		mustCarryWholePrompt(r)
		return Command{Op: OpReserve, ID: r.ID, Tokens: r.Tokens, MaxTokens: r.MaxTokens, Priority: r.Priority}
	case engine.ReleaseHeld:
		return Command{Op: OpReleaseHeld, ID: in.ID, Outcome: uint8(in.Outcome)}
	case engine.Cancel:
		return Command{Op: OpCancel, ID: in.ID}
	case engine.StartTransfer:
		return Command{Op: opStartTransfer, ID: in.ID, N: in.Tokens}
	case engine.Activate:
		return Command{Op: opActivate, ID: in.ID}
	case engine.CancelDestination:
		return Command{Op: OpCancelDestination, ID: in.ID}
	case engine.DestinationReady:
		return Command{Op: opDestinationReady, ID: in.ID, N: in.Tokens}
	}
	return Command{}
}

func mustCarryWholePrompt(r engine.Request) {
	if r.Skip != 0 {
		panic(fmt.Sprintf("plane: request %d leaves out %d prompt tokens (Request.Skip); a remote worker needs them all", r.ID, r.Skip))
	}
}

// Input is the engine input a command carries; nil for a room step.
func (c Command) Input() (engine.Input, error) {
	req := engine.Request{ID: c.ID, Tokens: c.Tokens, MaxTokens: c.MaxTokens, Priority: c.Priority}
	switch c.Op {
	case OpSubmit:
		p := engine.Release
		if c.Hold {
			p = engine.Hold
		}
		return &engine.Submit{Request: req, Policy: p}, nil
	case OpReserve:
		return &engine.Reserve{Request: req}, nil
	case OpReleaseHeld:
		return engine.ReleaseHeld{ID: c.ID, Outcome: engine.Outcome(c.Outcome)}, nil
	case OpCancel:
		return engine.Cancel{ID: c.ID}, nil
	case opStartTransfer:
		return engine.StartTransfer{ID: c.ID, Tokens: c.N}, nil
	case opActivate:
		return engine.Activate{ID: c.ID}, nil
	case OpCancelDestination:
		return engine.CancelDestination{ID: c.ID}, nil
	case opDestinationReady:
		return engine.DestinationReady{ID: c.ID, Tokens: c.N}, nil
	case OpOpenRoom, OpConnect, OpAck, OpResend, OpBye, OpHello, OpRun:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown command op %q", c.Op)
}

// Frame is one worker → router message. A frame with Items is numbered by
// Seq; one without is a control frame (acks, Head, Lost) and is not.
type Frame struct {
	Seq   uint64
	Items []Item
	// Head is the Seq the worker's next numbered frame will have.
	Head uint64
	// Acks are the sessions whose applied commands moved (or were
	// repeated) since the previous frame.
	Acks []SessionAck
	// Lost answers an OpResend the worker can no longer serve.
	Lost *LostFrames
	// Ended says the worker ended a session on its own (its router's key
	// in etcd is gone) and withdraws its requests: a router that is still
	// there after all learns why, ahead of the withdrawals.
	Ended *SessionEnded
	// Turn and Next answer a coupled session: the last turn the worker
	// has applied, and when its engine's next event is due (nil: none is
	// pending). Every frame of a coupled worker carries them; one that
	// answers a turn is numbered even without Items.
	Turn uint64
	Next *float64
	// Refused answers a hello the worker cannot take (a coupled session
	// needs the worker to itself); the session does not start.
	Refused *SessionEnded
	// Leave is set on the marker a router sends itself on a worker's out
	// subject when the worker's registration goes: it comes back after
	// every frame the worker sent before it left, so the worker's last
	// results are not overtaken by its departure.
	Leave string
	// Rejected counts the commands the worker has dropped since it
	// started, for failing their seal or a bound (gate.go).
	Rejected uint64
}

// SessionAck acknowledges a router session's commands up to Seq; From is
// the Seq of the first frame that can carry the session's work.
type SessionAck struct {
	Session uint64
	Seq     uint64
	From    uint64
}

// LostFrames says frames From up to Oldest (excluded) of a session's
// resend request are no longer in the worker's buffer.
type LostFrames struct {
	Session uint64
	From    uint64
	Oldest  uint64
}

// SessionEnded is a session the worker ended, and why.
type SessionEnded struct {
	Session uint64
	Reason  string
}

// Item is one entry of a frame; exactly one field is set.
type Item struct {
	Output  *WireOutput
	Input   *WireInput
	Room    *WireRoom
	Arrived *WireArrived
	Status  *WireStatus
}

// WireOutput is engine.Output as the router needs it: a prefill's tokens
// other than the first are left out (nothing downstream reads them, and
// they are most of a decode pass's size).
type WireOutput struct {
	Start       float64
	End         float64
	Ran         bool
	FirstTokens []engine.Token
	Completions []engine.Completion
	Rejections  []engine.Rejection
	Events      []engine.Event
	// KVEvents are kv.Event's, encoded as every struct here is (codec.go).
	KVEvents []kv.Event
	Metrics  engine.Metrics
}

type WireInput struct {
	At      float64
	Cmd     Command
	OK      bool
	Err     string
	DelayMs float64
}

type WireRoom struct {
	TID    uint64
	Params json.RawMessage
	Err    string
}

type WireArrived struct {
	TID   uint64
	ReqID uint64
}

type WireStatus struct {
	TID    uint64
	Status string // ack | abort | error
	Err    string
}

// LoadOnly reports whether w tells the router nothing but the worker's
// load after a pass: no first token, completion, refusal, request event
// or KV event. A mid-stream decode pass is one. The router only records
// it (Metrics, the series), so on a worker's own clock it can wait for
// the next frame that has something to say.
func (w *WireOutput) LoadOnly() bool {
	return len(w.FirstTokens) == 0 && len(w.Completions) == 0 && len(w.Rejections) == 0 &&
		len(w.Events) == 0 && len(w.KVEvents) == 0
}

// OutputOf copies what the router needs of out (which the engine reuses).
func OutputOf(out *engine.Output) *WireOutput {
	w := &WireOutput{Start: out.Start, End: out.End, Ran: out.Ran, Metrics: out.Metrics}
	for _, t := range out.Tokens {
		if t.Index == 0 {
			w.FirstTokens = append(w.FirstTokens, t)
		}
	}
	w.Completions = append(w.Completions, out.Completions...)
	w.Rejections = append(w.Rejections, out.Rejections...)
	w.Events = append(w.Events, out.Events...)
	for _, e := range out.KVEvents {
		e.Blocks = append([]kv.Block(nil), e.Blocks...)
		e.RemovedHashes = append([]kv.SeqHash(nil), e.RemovedHashes...)
		w.KVEvents = append(w.KVEvents, e)
	}
	return w
}

// engineOutput rebuilds an engine.Output on the router's clock (shift ms
// added to every instant).
func (w *WireOutput) engineOutput(shift float64) *engine.Output {
	out := &engine.Output{Start: w.Start + shift, End: w.End + shift, Ran: w.Ran, Metrics: w.Metrics,
		Tokens: w.FirstTokens, Completions: w.Completions, Rejections: w.Rejections, Events: w.Events, KVEvents: w.KVEvents}
	for i := range out.Tokens {
		out.Tokens[i].At += shift
	}
	for i := range out.Completions {
		c := &out.Completions[i]
		c.At += shift
		c.Arrival += shift
		c.FirstTokenAt += shift
	}
	for i := range out.Rejections {
		out.Rejections[i].At += shift
	}
	for i := range out.Events {
		out.Events[i].At += shift
	}
	return out
}

func StatusName(s handoff.Status) string {
	switch s {
	case handoff.ACK:
		return "ack"
	case handoff.Abort:
		return "abort"
	}
	return "error"
}

func statusOf(s string) handoff.Status {
	switch s {
	case "ack":
		return handoff.ACK
	case "abort":
		return handoff.Abort
	}
	return handoff.Error
}

// RemoteItems turns a frame into the cluster's items, on its clock.
func RemoteItems(f *Frame, shift float64) ([]cluster.RemoteItem, error) {
	out := make([]cluster.RemoteItem, 0, len(f.Items))
	for _, it := range f.Items {
		switch {
		case it.Output != nil:
			out = append(out, cluster.RemoteItem{Output: it.Output.engineOutput(shift)})
		case it.Input != nil:
			in, err := it.Input.Cmd.Input()
			if err != nil {
				return nil, err
			}
			if in == nil {
				continue
			}
			r := engine.Reply{OK: it.Input.OK, DelayMs: it.Input.DelayMs}
			if it.Input.Err != "" {
				r.Err = errors.New(it.Input.Err)
			}
			out = append(out, cluster.RemoteItem{Input: &engine.InputResult{At: it.Input.At + shift, Input: in, Reply: r}})
		case it.Room != nil:
			out = append(out, cluster.RemoteItem{Room: &cluster.RemoteRoom{TID: it.Room.TID, Params: it.Room.Params, Err: it.Room.Err}})
		case it.Arrived != nil:
			out = append(out, cluster.RemoteItem{Arrived: &cluster.RemoteArrived{TID: it.Arrived.TID, ReqID: it.Arrived.ReqID}})
		case it.Status != nil:
			out = append(out, cluster.RemoteItem{Status: &cluster.RemoteStatus{TID: it.Status.TID, Status: statusOf(it.Status.Status), Err: it.Status.Err}})
		}
	}
	return out, nil
}
