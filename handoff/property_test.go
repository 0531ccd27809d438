package handoff

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/kvstrand/mocker/engine"
)

// TestMachine_EndsOnceWhateverComes: fed any sequence of events, in any
// order, a machine never panics, finishes at most once, asks for nothing
// after it finished, and finishes with a terminal phase.
func TestMachine_EndsOnceWhateverComes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		order := rapid.SampledFrom([]Order{Aggregated, SourceFirst, DestinationFirst}).Draw(rt, "order")
		m := New(Spec{Order: order, Request: engine.Request{ID: 1, Tokens: make([]uint32, 40), MaxTokens: 3},
			PrefillName: "p", DecodeName: "d", TransferMode: engine.TransferFullPrompt,
			DecodeLater: rapid.Bool().Draw(rt, "decode_later")})
		sides := []Side{Prefill, Decode}
		events := []func(*rapid.T) Event{
			func(*rapid.T) Event { return Start{} },
			func(rt *rapid.T) Event {
				kind := rapid.SampledFrom([]engine.EventKind{engine.EventHoldStarted, engine.EventHoldReleased,
					engine.EventTransferStart, engine.EventDecodeWaitStart, engine.EventDecodeReserved,
					engine.EventDestinationCancelled, engine.EventCancelled}).Draw(rt, "kind")
				out := rapid.SampledFrom([]engine.Outcome{engine.Transferred, engine.Aborted}).Draw(rt, "outcome")
				return WorkerEvent{Side: rapid.SampledFrom(sides).Draw(rt, "side"), Event: engine.Event{Kind: kind, RequestID: 1, Outcome: out}}
			},
			func(rt *rapid.T) Event {
				return WorkerCompletion{Side: rapid.SampledFrom(sides).Draw(rt, "side"),
					Completion: engine.Completion{RequestID: 1, Held: rapid.Bool().Draw(rt, "held")}}
			},
			func(rt *rapid.T) Event {
				return WorkerRejection{Side: rapid.SampledFrom(sides).Draw(rt, "side"),
					Rejection: engine.Rejection{RequestID: 1, Code: engine.RejectHandoffTimeout}}
			},
			func(rt *rapid.T) Event {
				in := rapid.SampledFrom([]engine.Input{&engine.Submit{}, &engine.Reserve{}, engine.Cancel{ID: 1},
					engine.Activate{ID: 1}, engine.DestinationReady{ID: 1}}).Draw(rt, "input")
				return InputReply{Side: rapid.SampledFrom(sides).Draw(rt, "side"), Input: in, Reply: engine.Reply{OK: rapid.Bool().Draw(rt, "ok")}}
			},
			func(*rapid.T) Event { return DecodeArrived{} },
			func(rt *rapid.T) Event {
				return TransferStatus{Status: rapid.SampledFrom([]Status{ACK, Abort, Error}).Draw(rt, "status")}
			},
			func(*rapid.T) Event { return Stop{Reason: "stop"} },
			func(rt *rapid.T) Event {
				return Claim{DecodeName: "d2", MaxTokens: rapid.IntRange(0, 5).Draw(rt, "max_tokens")}
			},
		}
		finishes := 0
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			ev := rapid.SampledFrom(events).Draw(rt, "event")(rt)
			wasDone := m.Finished()
			// Step appends to the slice it is given and leaves what it
			// holds alone.
			kept := Action{Kind: Connect, Error: "kept"}
			acts := []Action{kept}
			m.Step(ev, &acts)
			if len(acts) == 0 || acts[0] != kept {
				rt.Fatalf("Step after %T dropped or changed the action it was given: %v", ev, acts)
			}
			acts = acts[1:]
			if wasDone && len(acts) > 0 {
				rt.Fatalf("a finished machine asked for %v after %T", acts, ev)
			}
			for _, a := range acts {
				if a.Kind == Finish {
					finishes++
					if !a.Phase.Terminal() {
						rt.Fatalf("finished in phase %s", a.Phase)
					}
				}
			}
		}
		if finishes > 1 {
			rt.Fatalf("finished %d times", finishes)
		}
		if m.Finished() != (finishes == 1) || (m.Finished() && !m.Phase().Terminal()) {
			rt.Fatalf("Finished %v, phase %s, %d finishes", m.Finished(), m.Phase(), finishes)
		}
	})
}
