package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tb is what the helpers need from *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// smallArgs is a vLLM worker with 4-token blocks and a pool of n blocks,
// small enough that tests can reason about every block.
func smallArgs(n int, mod ...func(*Args)) Args {
	a := DefaultArgs()
	a.BlockSize = 4
	a.NumGPUBlocks = n
	for _, f := range mod {
		f(&a)
	}
	return a
}

func intp(v int) *int { return &v }

func newWorker(t testing.TB, a Args) *Worker {
	t.Helper()
	w, err := New(a, nil, 7)
	require.NoError(t, err)
	return w
}

// seqTokens returns n distinct-looking tokens starting at base.
func seqTokens(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// record keeps deep copies of every Output a test saw.
type record struct {
	outs        []Output
	tokens      []Token
	completions []Completion
	rejections  []Rejection
	events      []Event
	kvEvents    []kv.Event
	kvTokens    []uint32
}

func (r *record) add(out *Output) {
	c := *out
	c.Tokens = append([]Token(nil), out.Tokens...)
	c.Completions = append([]Completion(nil), out.Completions...)
	c.Rejections = append([]Rejection(nil), out.Rejections...)
	c.Events = append([]Event(nil), out.Events...)
	c.KVEvents = nil
	c.KVTokens = append([]uint32(nil), out.KVTokens...)
	for _, e := range out.KVEvents {
		e.Blocks = append([]kv.Block(nil), e.Blocks...)
		e.RemovedHashes = append([]kv.SeqHash(nil), e.RemovedHashes...)
		c.KVEvents = append(c.KVEvents, e)
	}
	r.outs = append(r.outs, c)
	r.tokens = append(r.tokens, c.Tokens...)
	r.completions = append(r.completions, c.Completions...)
	r.rejections = append(r.rejections, c.Rejections...)
	r.events = append(r.events, c.Events...)
	r.kvEvents = append(r.kvEvents, c.KVEvents...)
	r.kvTokens = append(r.kvTokens, c.KVTokens...)
}

func (r *record) eventsOf(k EventKind) []Event {
	var out []Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (r *record) completion(id uint64) (Completion, bool) {
	for _, c := range r.completions {
		if c.RequestID == id {
			return c, true
		}
	}
	return Completion{}, false
}

// checkWorker asserts the block invariants of w, whichever its engine: the
// scheduler's incremental counters agree with its own recount, and active +
// inactive + free == total.
func checkWorker(t tb, w *Worker) {
	t.Helper()
	if a, ok := w.Scheduler().(interface{ audit() error }); ok {
		require.NoError(t, a.audit())
	}
	m := w.Metrics()
	require.Equal(t, m.TotalBlocks, m.ActiveBlocks+m.InactiveBlocks+m.FreeBlocks, "block conservation: %+v", m)
	require.LessOrEqual(t, m.HeldBlocks, m.ActiveBlocks)
}

// step runs one Step of w at now, which must produce an Output, and
// records it. The Output is the worker's buffer: read it before the next
// Step.
func step(t tb, w *Worker, r *record, now float64) *Output {
	t.Helper()
	out := w.Step(now)
	require.NotNil(t, out, "nothing happened at %v", now)
	r.add(out)
	return out
}

// drive steps w synchronously from now until it has no pass to run and no
// event to flush, recording outputs and checking invariants after every
// step. Handoff deadlines still pending are left alone (so a hold stays
// held); driveAll fires them. It returns the clock.
func drive(t tb, w *Worker, r *record, now float64) float64 {
	t.Helper()
	return driveWith(t, w, r, now, w.workWake)
}

// driveAll is drive with deadlines: it runs until the worker parks.
func driveAll(t tb, w *Worker, r *record, now float64) float64 {
	t.Helper()
	return driveWith(t, w, r, now, w.NextWake)
}

// driveAny is drive, or driveAll when deadlines is set.
func driveAny(t tb, w *Worker, r *record, now float64, deadlines bool) float64 {
	t.Helper()
	if deadlines {
		return driveAll(t, w, r, now)
	}
	return drive(t, w, r, now)
}

func driveWith(t tb, w *Worker, r *record, now float64, next func() (float64, bool)) float64 {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 100000, "worker never parked")
		at, ok := next()
		if !ok {
			return now
		}
		now = max(now, at)
		if out := w.Step(now); out != nil {
			checkDecodeTokens(t, out)
			r.add(out)
			now = max(now, out.End)
		}
		checkWorker(t, w)
	}
}

// checkDecodeTokens checks that each decode step out's pass counts emits
// a later token (index > 0), as a decode step does unless the pass
// preempts its request after scheduling it, and then refunds the step.
// Recomputes that finish emit later tokens too, so it is a bound. A first
// token counts in a pass that prefilled nothing: under dynamo_compat an
// SGLang request whose first token found no free slot in its extend pass
// samples it in the next decode step, as Dynamo's does.
func checkDecodeTokens(t tb, out *Output) {
	t.Helper()
	if out.firstTokens {
		return
	}
	later := 0
	for _, tk := range out.Tokens {
		if tk.Index > 0 || out.PrefillTokens == 0 {
			later++
		}
	}
	if out.DecodeTokens > later {
		t.Errorf("pass at %.3f: %d decode tokens scheduled, %d later tokens emitted", out.Start, out.DecodeTokens, later)
		t.FailNow()
	}
}

// serialize writes outputs in a fixed textual form for byte comparison.
func serialize(sb *strings.Builder, worker int, out *Output) {
	fmt.Fprintf(sb, "w%d pass %.6f-%.6f ran=%v p=%.6f d=%.6f\n", worker, out.Start, out.End, out.Ran, out.PrefillMs, out.DecodeMs)
	for _, tk := range out.Tokens {
		fmt.Fprintf(sb, " tok %d #%d %d @%.6f\n", tk.RequestID, tk.Index, tk.Token, tk.At)
	}
	for _, c := range out.Completions {
		fmt.Fprintf(sb, " done %+v\n", c)
	}
	for _, rj := range out.Rejections {
		fmt.Fprintf(sb, " rej %+v\n", rj)
	}
	for _, e := range out.Events {
		fmt.Fprintf(sb, " ev %s %+v\n", e.Kind, e)
	}
	for _, e := range out.KVEvents {
		fmt.Fprintf(sb, " kv %d %s parent=%v/%x blocks=%v removed=%v\n", e.ID, e.Kind, e.HasParent, uint64(e.Parent), e.Blocks, e.RemovedHashes)
	}
	fmt.Fprintf(sb, " m %+v\n", out.Metrics)
}

// drivePair drives a and b, recording into ra and rb, from now until they
// park, which must be at the same instant; it returns that instant.
func drivePair(t tb, a, b *Worker, ra, rb *record, now float64) float64 {
	t.Helper()
	na, nb := drive(t, a, ra, now), drive(t, b, rb, now)
	require.Equal(t, na, nb, "the two workers park at different instants")
	return na
}

// requireSameOutputs fails unless ra and rb recorded the same outputs,
// byte for byte as serialize writes them.
func requireSameOutputs(t tb, ra, rb *record, msg string) {
	t.Helper()
	var sa, sb strings.Builder
	for i := range ra.outs {
		serialize(&sa, 0, &ra.outs[i])
	}
	for i := range rb.outs {
		serialize(&sb, 0, &rb.outs[i])
	}
	require.Equal(t, sa.String(), sb.String(), msg)
}

// req is the live request id, nil when there is none.
func (g *SGLang) req(id uint64) *sgReq { r, _ := g.byID.Get(id); return r }

// seq is the live sequence id, nil when there is none.
func (v *VLLM) seq(id uint64) *seq { s, _ := v.byID.Get(id); return s }
