package handoff

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
)

var update = flag.Bool("update", false, "rewrite the transcripts' expected output")

// TestTranscripts runs every testdata/*.txt transcript: each line that does
// not start with "  " is an event (or "spec ..." to set the machine up);
// the indented lines under it are what the machine answers, the actions it
// asks for and its phase after the event. The test replays the events and
// compares the answers; with -update it rewrites them, for review.
//
// Events:
//
//	spec order=source-first|destination-first|aggregated [mode=full_prompt|destination_missing] [decode=later]
//	start
//	event prefill|decode KIND [at=] [blocks=] [outcome=] [reason=] [dur=] [missing=] [delay=]
//	complete prefill|decode [at=] [arrival=] [first=] [out=] [held]
//	reject prefill|decode [at=] code=CODE [reason=WORDS...]
//	reply prefill|decode INPUT ok|fail [err=WORDS...]
//	arrived
//	status ack|abort|error [err=WORDS...]
//	stop WORDS...
//	claim [decode=NAME] [max_tokens=N]
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			got := replay(t, string(raw))
			if *update {
				require.NoError(t, os.WriteFile(f, []byte(got), 0o644))
				return
			}
			assert.Equal(t, string(raw), got)
		})
	}
}

// replay runs the events of a transcript and returns it with the machine's
// answers in place of the expected ones.
func replay(t *testing.T, transcript string) string {
	t.Helper()
	var out strings.Builder
	var m *Machine
	tokens := make([]uint32, 100)
	for _, line := range strings.Split(strings.TrimRight(transcript, "\n"), "\n") {
		if strings.HasPrefix(line, "  ") {
			continue // an answer: regenerated below
		}
		out.WriteString(line + "\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		kv := keyValues(f[0], f[1:])
		if f[0] == "spec" {
			spec := Spec{Request: engine.Request{ID: 7, Tokens: tokens, MaxTokens: 4},
				PrefillName: "prefill-0", DecodeName: "decode-0", SessionTimeoutMs: 500,
				TransferMode: engine.TransferTimingMode(kv.str("mode", "full_prompt")),
				DecodeLater:  kv.str("decode", "") == "later"}
			switch kv.str("order", "") {
			case "source-first":
				spec.Order = SourceFirst
			case "destination-first":
				spec.Order = DestinationFirst
			case "aggregated":
				spec.Order = Aggregated
			default:
				t.Fatalf("spec: unknown order in %q", line)
			}
			m = New(spec)
			continue
		}
		require.NotNil(t, m, "a transcript starts with spec")
		var acts []Action
		m.Step(parseEvent(t, f, kv), &acts)
		for _, a := range acts {
			out.WriteString("  " + describe(a) + "\n")
		}
		fmt.Fprintf(&out, "  phase %s\n", m.Phase())
	}
	return out.String()
}

type kvs map[string]string

// keyValues reads a line's key=value words. Where the grammar above says
// WORDS (a rejection's reason, an error) the value runs to the end of the
// line; an event's reason is one word.
func keyValues(line string, words []string) kvs {
	m := kvs{}
	for i, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			m[w] = ""
			continue
		}
		if k == "err" || (k == "reason" && line == "reject") {
			v = strings.Join(append([]string{v}, words[i+1:]...), " ")
			m[k] = v
			break
		}
		m[k] = v
	}
	return m
}

func (m kvs) has(k string) bool { _, ok := m[k]; return ok }

func (m kvs) str(k, def string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return def
}

func (m kvs) num(k string) float64 {
	v, _ := strconv.ParseFloat(m[k], 64)
	return v
}

func side(t *testing.T, w string) Side {
	switch w {
	case "prefill":
		return Prefill
	case "decode":
		return Decode
	}
	t.Fatalf("side %q: want prefill or decode", w)
	return 0
}

var eventKinds = map[string]engine.EventKind{
	"hold_started": engine.EventHoldStarted, "hold_released": engine.EventHoldReleased,
	"transfer_start": engine.EventTransferStart, "wait_start": engine.EventDecodeWaitStart,
	"reserved": engine.EventDecodeReserved, "dest_cancelled": engine.EventDestinationCancelled,
	"cancelled": engine.EventCancelled, "activated": engine.EventDestinationActivated,
}

var reasons = map[string]engine.EndReason{
	"transfer_complete": engine.EndTransferComplete, "abort_timeout": engine.EndAbortTimeout,
	"session_timeout": engine.EndSessionTimeout, "cancelled": engine.EndCancelled, "released": engine.EndReleased,
}

var codes = map[string]engine.RejectCode{
	"too_long": engine.RejectTooLong, "never_fits": engine.RejectNeverFits,
	"budget": engine.RejectBudget, "handoff_timeout": engine.RejectHandoffTimeout,
}

func parseEvent(t *testing.T, f []string, kv kvs) Event {
	t.Helper()
	switch f[0] {
	case "start":
		return Start{}
	case "event":
		kind, ok := eventKinds[f[2]]
		require.True(t, ok, "unknown event kind %q", f[2])
		reason, ok := reasons[kv.str("reason", "")]
		require.True(t, ok || !kv.has("reason"), "unknown end reason %q", kv.str("reason", ""))
		e := engine.Event{Kind: kind, At: kv.num("at"), RequestID: 7, Blocks: int(kv.num("blocks")),
			DurationMs: kv.num("dur"), MissingTokens: int(kv.num("missing")), DelayMs: kv.num("delay"),
			Reason: reason}
		switch kv.str("outcome", "") {
		case "transferred":
			e.Outcome = engine.Transferred
		case "aborted":
			e.Outcome = engine.Aborted
		}
		return WorkerEvent{Side: side(t, f[1]), Event: e}
	case "complete":
		return WorkerCompletion{Side: side(t, f[1]), Completion: engine.Completion{RequestID: 7, At: kv.num("at"),
			Arrival: kv.num("arrival"), FirstTokenAt: kv.num("first"), OutputTokens: int(kv.num("out")), Held: kv.has("held")}}
	case "reject":
		return WorkerRejection{Side: side(t, f[1]), Rejection: engine.Rejection{RequestID: 7, At: kv.num("at"),
			Code: codes[kv.str("code", "")], Reason: kv.str("reason", "")}}
	case "reply":
		var in engine.Input
		switch f[2] {
		case "submit":
			in = &engine.Submit{}
		case "reserve":
			in = &engine.Reserve{}
		case "cancel":
			in = engine.Cancel{ID: 7}
		case "start_transfer":
			in = engine.StartTransfer{ID: 7}
		case "activate":
			in = engine.Activate{ID: 7}
		case "destination_ready":
			in = engine.DestinationReady{ID: 7}
		case "cancel_destination":
			in = engine.CancelDestination{ID: 7}
		default:
			t.Fatalf("reply: unknown input %q", f[2])
		}
		r := engine.Reply{OK: f[3] == "ok"}
		if e := kv.str("err", ""); e != "" {
			r.Err = fmt.Errorf("%s", e)
		}
		return InputReply{Side: side(t, f[1]), Input: in, Reply: r}
	case "arrived":
		return DecodeArrived{}
	case "status":
		st := map[string]Status{"ack": ACK, "abort": Abort, "error": Error}[f[1]]
		return TransferStatus{Status: st, Err: kv.str("err", "")}
	case "stop":
		return Stop{Reason: strings.Join(f[1:], " ")}
	case "claim":
		return Claim{DecodeName: kv.str("decode", ""), MaxTokens: int(kv.num("max_tokens"))}
	}
	t.Fatalf("unknown event %q", f[0])
	return nil
}

func describe(a Action) string {
	switch a.Kind {
	case Apply:
		switch in := a.Input.(type) {
		case *engine.Submit:
			return fmt.Sprintf("apply %s submit policy=%s max_tokens=%d", a.Side, in.Policy, in.Request.MaxTokens)
		case *engine.Reserve:
			return fmt.Sprintf("apply %s reserve max_tokens=%d", a.Side, in.Request.MaxTokens)
		case engine.Cancel:
			return fmt.Sprintf("apply %s cancel", a.Side)
		case engine.StartTransfer:
			return fmt.Sprintf("apply %s start_transfer tokens=%d", a.Side, in.Tokens)
		case engine.DestinationReady:
			return fmt.Sprintf("apply %s destination_ready tokens=%d", a.Side, in.Tokens)
		case engine.Activate:
			return fmt.Sprintf("apply %s activate", a.Side)
		case engine.CancelDestination:
			return fmt.Sprintf("apply %s cancel_destination", a.Side)
		}
		return fmt.Sprintf("apply %s %T", a.Side, a.Input)
	case OpenRoom:
		return "open_room"
	case Connect:
		return "connect"
	case CloseRoom:
		if a.Transferred {
			return "close_room transferred"
		}
		return "close_room aborted"
	case Finish:
		if a.Error == "" {
			return "finish " + a.Phase.String()
		}
		return fmt.Sprintf("finish %s: %s", a.Phase, a.Error)
	}
	return a.Kind.String()
}
