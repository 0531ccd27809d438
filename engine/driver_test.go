package engine

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCluster simulates a two-pool cluster in miniature on one engine (args
// builds its worker args): two aggregated workers and one prefill worker
// whose holds are released a random delay after they start. It returns the
// serialized log of every output and the completions.
func runCluster(t *testing.T, args func(n int, mod ...func(*Args)) Args, seed uint64, n int) (string, []Completion) {
	t.Helper()
	var ws []*Worker
	for i, wt := range []WorkerType{WorkerAggregated, WorkerAggregated, WorkerPrefill} {
		w, err := New(args(48, func(a *Args) { a.WorkerType = wt }), nil, seed+uint64(i))
		require.NoError(t, err)
		ws = append(ws, w)
	}
	v := NewVirtual(ws...)
	rng := rand.New(rand.NewPCG(seed, 99))
	var sb strings.Builder
	var done []Completion
	v.OnOutput = func(w int, out *Output) {
		require.Equal(t, out.End, v.Now(), "outputs are delivered at their pass end")
		serialize(&sb, w, out)
		done = append(done, out.Completions...)
		for _, e := range out.Events {
			if e.Kind == EventHoldStarted {
				v.ReleaseHeld(v.Now()+rng.Float64()*50, w, e.RequestID, Transferred)
			}
		}
		checkWorker(t, v.Worker(w))
	}
	at := 0.0
	for i := range n {
		at += rng.ExpFloat64() * 5
		w := rng.IntN(3)
		pol := Release
		if w == 2 {
			pol = Hold
		}
		prefix := seqTokens(uint32(1000*rng.IntN(3)), 8)
		tokens := slices.Concat(prefix, seqTokens(rng.Uint32(), 1+rng.IntN(30)))
		v.Submit(at, w, Request{ID: uint64(i), Tokens: tokens, MaxTokens: 1 + rng.IntN(12)}, pol)
	}
	require.NoError(t, v.Run())
	for i := range ws {
		m := ws[i].Metrics()
		assert.Zero(t, m.ActiveBlocks, "worker %d drained", i)
		assert.Zero(t, m.HeldRequests)
	}
	return sb.String(), done
}

func TestVirtual_Causality(t *testing.T) {
	_, done := runCluster(t, smallArgs, 7, 300)
	require.Len(t, done, 300)
	for _, c := range done {
		assert.LessOrEqual(t, c.Arrival, c.FirstTokenAt, "request %d", c.RequestID)
		assert.LessOrEqual(t, c.FirstTokenAt, c.At, "request %d", c.RequestID)
		assert.Less(t, c.Arrival, c.FirstTokenAt, "a token takes modeled time")
	}
}

// liveOutputs copies the parts of outputs a live test looks at and hands
// them to the test goroutine.
func liveOutputs() (func(*Output), <-chan Output) {
	ch := make(chan Output, 1024)
	return func(out *Output) {
		c := Output{Start: out.Start, End: out.End, Ran: out.Ran, Metrics: out.Metrics}
		c.Tokens = append([]Token(nil), out.Tokens...)
		c.Completions = append([]Completion(nil), out.Completions...)
		c.Events = append([]Event(nil), out.Events...)
		ch <- c
	}, ch
}

func waitFor(t *testing.T, ch <-chan Output, what string, pred func(Output) bool) Output {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case o := <-ch:
			if pred(o) {
				return o
			}
		case <-deadline:
			t.Fatalf("no output with %s", what)
			return Output{}
		}
	}
}

func TestLive_ModeledTimeAndStop(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	on, ch := liveOutputs()
	l := StartLive(w, LiveOptions{SpeedupRatio: 100, OnOutput: on})
	require.NoError(t, l.Submit(Request{ID: 1, Tokens: seqTokens(1, 12), MaxTokens: 4}, Release))
	o := waitFor(t, ch, "completion", func(o Output) bool { return len(o.Completions) > 0 })
	c := o.Completions[0]
	assert.Equal(t, 4, c.OutputTokens)
	assert.LessOrEqual(t, c.Arrival, c.FirstTokenAt)
	assert.LessOrEqual(t, c.FirstTokenAt, c.At)
	assert.GreaterOrEqual(t, l.Now(), c.At, "outputs are delivered no earlier than their modeled end")
	require.Error(t, l.Submit(Request{ID: 1, Tokens: nil}, Release))
	l.Stop()
	l.Stop()
	assert.ErrorIs(t, l.Submit(Request{ID: 2, Tokens: []uint32{1}}, Release), ErrStopped)
	assert.False(t, l.Cancel(2))
}

// TestLive_BusyWorkerChainsPasses: a worker with work keeps passes
// back to back in modeled time, however late the wall-clock timer fires, so
// modeled latencies do not grow with the speedup. An input reaching an idle
// worker still takes the modeled time of its wall-clock arrival.
func TestLive_BusyWorkerChainsPasses(t *testing.T) {
	const n = 40
	w := newWorker(t, smallArgs(1024))
	on, ch := liveOutputs()
	l := StartLive(w, LiveOptions{SpeedupRatio: 50, OnOutput: on})
	defer l.Stop()

	require.NoError(t, l.Submit(Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: n}, Release))
	var passes []Output
	for len(passes) < n {
		o := waitFor(t, ch, "a pass", func(o Output) bool { return o.Ran })
		passes = append(passes, o)
	}
	for i := 1; i < n; i++ {
		assert.Equal(t, passes[i-1].End, passes[i].Start, "pass %d starts when pass %d ends", i, i-1)
	}
	require.Len(t, passes[n-1].Completions, 1)
	c := passes[n-1].Completions[0]
	assert.Equal(t, n, c.OutputTokens)

	// Idle now: a later arrival is stamped with the wall clock's modeled
	// time, not chained to the last pass.
	time.Sleep(5 * time.Millisecond) // at least 250 modeled ms at speedup 50
	require.NoError(t, l.Submit(Request{ID: 2, Tokens: seqTokens(1, 8), MaxTokens: 1}, Release))
	o := waitFor(t, ch, "completion", func(o Output) bool { return len(o.Completions) > 0 })
	assert.GreaterOrEqual(t, o.Completions[0].Arrival, c.At+250)
	assert.Equal(t, o.Completions[0].Arrival, o.Start, "an idle worker starts the pass at the arrival")
}

func TestVirtual_DestinationReadyIsAScheduledInput(t *testing.T) {
	p := newWorker(t, sglangArgs(32, asPrefill, withTransfer(0.5), func(a *Args) { a.HandoffSessionTimeoutMs = 1000 }))
	v := NewVirtual(p)
	var inputs []InputResult
	var events []Event
	v.OnInput = func(r InputResult) { inputs = append(inputs, r) }
	v.OnOutput = func(_ int, out *Output) { events = append(events, out.Events...) }
	v.Submit(0, 0, Request{ID: 1, Tokens: seqTokens(1, 10), MaxTokens: 1}, Hold)
	v.DestinationReady(20, 0, 1, 10)
	v.DestinationReady(30, 0, 1, 10) // already ready
	v.DestinationReady(40, 0, 7, 10) // unknown
	require.NoError(t, v.Run())

	require.Len(t, inputs, 3)
	for i, want := range []bool{true, false, false} {
		assert.Equal(t, InputDestinationReady, inputs[i].Kind)
		assert.Equal(t, "DestinationReady", inputs[i].Kind.String())
		assert.Equal(t, want, inputs[i].OK, "input %d", i)
	}
	var kinds []EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
		if e.Kind == EventHoldStarted {
			assert.GreaterOrEqual(t, e.At, 20.0, "the prefill ran only once the destination was ready")
		}
	}
	assert.Equal(t, []EventKind{EventHoldStarted, EventTransferStart, EventHoldReleased}, kinds)
	assert.Zero(t, p.Metrics().ActiveBlocks)
}

func TestRejectCode_Labels(t *testing.T) {
	for code, want := range map[RejectCode]string{
		RejectTooLong:        "too_long",
		RejectNeverFits:      "never_fits",
		RejectBudget:         "budget",
		RejectHandoffTimeout: "handoff_timeout",
		RejectCode(0):        "unknown",
	} {
		assert.Equal(t, want, code.String())
	}
}
