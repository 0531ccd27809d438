package engine

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

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
				v.Schedule(v.Now()+rng.Float64()*50, w, ReleaseHeld{ID: e.RequestID, Outcome: Transferred})
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
		v.Schedule(at, w, &Submit{Request: Request{ID: uint64(i), Tokens: tokens, MaxTokens: 1 + rng.IntN(12)}, Policy: pol})
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

// TestVirtual_BusyWorkerChainsPasses: a worker with work keeps passes
// back to back in modeled time, and an input reaching an idle worker later
// starts its pass at the input's own time, not chained to the last pass.
func TestVirtual_BusyWorkerChainsPasses(t *testing.T) {
	const n = 40
	w := newWorker(t, smallArgs(1024))
	v := NewVirtual(w)
	var passes []Output
	var done []Completion
	v.OnOutput = func(_ int, o *Output) {
		if o.Ran {
			passes = append(passes, Output{Start: o.Start, End: o.End})
		}
		done = append(done, o.Completions...)
	}
	v.Schedule(0, 0, &Submit{Request: Request{ID: 1, Tokens: seqTokens(1, 8), MaxTokens: n}})
	require.NoError(t, v.Run())
	require.Len(t, passes, n)
	for i := 1; i < n; i++ {
		assert.Equal(t, passes[i-1].End, passes[i].Start, "pass %d starts when pass %d ends", i, i-1)
	}
	require.Len(t, done, 1)
	last := done[0].At
	v.Schedule(last+250, 0, &Submit{Request: Request{ID: 2, Tokens: seqTokens(1, 8), MaxTokens: 1}})
	require.NoError(t, v.Run())
	require.Len(t, done, 2)
	assert.Equal(t, last+250, done[1].Arrival)
	assert.Equal(t, last+250, passes[n].Start, "an idle worker starts the pass at the arrival")
}

// TestVirtual_TicketHoldsItsPlace: a ticket stops the queue until it is
// filled, and its input then runs in the place it was reserved, before
// events scheduled at the same time after the ticket was taken.
func TestVirtual_TicketHoldsItsPlace(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	v := NewVirtual(w)
	var order []string
	tk := v.Ticket(10)
	v.Call(10, func() { order = append(order, "call") })
	v.Call(5, func() { order = append(order, "early") })
	require.NoError(t, v.Run())
	assert.Equal(t, []string{"early"}, order, "the queue stops at the unfilled ticket")
	at, blocked, ok := v.Next()
	require.True(t, ok)
	assert.True(t, blocked)
	assert.Equal(t, 10.0, at)
	assert.Equal(t, 1, v.PendingTickets())
	v.FillCall(tk, func() { order = append(order, "ticket") })
	require.NoError(t, v.Run())
	assert.Equal(t, []string{"early", "ticket", "call"}, order)
	assert.Zero(t, v.PendingTickets())

	// A ticket gone from the queue takes no fill: not even when the
	// place that held it holds another event's since.
	v.Call(20, func() { order = append(order, "later") })
	tk2 := v.Ticket(20)
	v.FillCall(tk, func() { order = append(order, "stale") })
	v.Void(tk)
	assert.Equal(t, 1, v.PendingTickets())
	v.FillCall(tk2, func() { order = append(order, "second ticket") })
	require.NoError(t, v.Run())
	assert.Equal(t, []string{"early", "ticket", "call", "later", "second ticket"}, order)

	v.AdvanceTo(50)
	assert.Equal(t, 50.0, v.Now())
	v.Call(60, func() {})
	v.AdvanceTo(100)
	assert.Equal(t, 60.0, v.Now(), "the clock never passes a queued event")
	v.AdvanceTo(10)
	assert.Equal(t, 60.0, v.Now(), "nor goes back")
}

func TestVirtual_DestinationReadyIsAScheduledInput(t *testing.T) {
	p := newWorker(t, sglangArgs(32, asPrefill, withTransfer(0.5), func(a *Args) { a.HandoffSessionTimeoutMs = 1000 }))
	v := NewVirtual(p)
	var inputs []InputResult
	var events []Event
	v.OnInput = func(r InputResult) {
		if _, ok := r.Input.(DestinationReady); ok {
			inputs = append(inputs, r)
		}
	}
	v.OnOutput = func(_ int, out *Output) { events = append(events, out.Events...) }
	v.Schedule(0, 0, &Submit{Request: Request{ID: 1, Tokens: seqTokens(1, 10), MaxTokens: 1}, Policy: Hold})
	v.Schedule(20, 0, DestinationReady{ID: 1, Tokens: 10})
	v.Schedule(30, 0, DestinationReady{ID: 1, Tokens: 10}) // already ready
	v.Schedule(40, 0, DestinationReady{ID: 7, Tokens: 10}) // unknown
	require.NoError(t, v.Run())

	require.Len(t, inputs, 3)
	for i, want := range []bool{true, false, false} {
		assert.IsType(t, DestinationReady{}, inputs[i].Input)
		assert.Equal(t, want, inputs[i].Reply.OK, "input %d", i)
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

// TestVirtual_RefusedInputReachesOnInput: with OnInput set, a Submit the
// worker refuses is reported with its error and the run goes on; without
// it, the refusal stops the run.
func TestVirtual_RefusedInputReachesOnInput(t *testing.T) {
	w := newWorker(t, smallArgs(64))
	v := NewVirtual(w)
	var refused []error
	v.OnInput = func(r InputResult) {
		if r.Reply.Err != nil {
			refused = append(refused, r.Reply.Err)
		}
	}
	v.Schedule(0, 0, &Submit{Request: Request{ID: 1}})
	v.Schedule(1, 0, &Submit{Request: Request{ID: 2, Tokens: seqTokens(1, 8), MaxTokens: 1}})
	require.NoError(t, v.Run())
	require.Len(t, refused, 1, "the empty prompt is refused and reported")
	assert.Zero(t, w.Metrics().ActiveBlocks, "the good request ran to its end")

	quiet := NewVirtual(newWorker(t, smallArgs(64)))
	quiet.Schedule(0, 0, &Submit{Request: Request{ID: 1}})
	require.Error(t, quiet.Run(), "nobody listens: the refusal stops the run")
}

// TestVirtual_RunDueLeavesWhatItQueuesAtItsInstant: RunDue runs the events
// at its instant that were queued before it, not those they queue there;
// RunUntil runs both.
func TestVirtual_RunDueLeavesWhatItQueuesAtItsInstant(t *testing.T) {
	for _, due := range []bool{true, false} {
		v := NewVirtual(newWorker(t, smallArgs(64)))
		var order []string
		v.Call(5, func() { order = append(order, "before") })
		v.Call(10, func() {
			order = append(order, "queued")
			v.Call(10, func() { order = append(order, "caused") })
			v.Call(12, func() { order = append(order, "later") })
		})
		if !due {
			require.NoError(t, v.RunUntil(10))
			assert.Equal(t, []string{"before", "queued", "caused"}, order)
			continue
		}
		require.NoError(t, v.RunDue(10))
		assert.Equal(t, []string{"before", "queued"}, order)
		assert.Equal(t, 10.0, v.Now())
		at, ok := v.NextLive()
		require.True(t, ok)
		assert.Equal(t, 10.0, at, "what the step caused at its instant is next")
		require.NoError(t, v.RunDue(10))
		assert.Equal(t, []string{"before", "queued", "caused"}, order)
		require.NoError(t, v.RunDue(11))
		assert.Equal(t, 11.0, v.Now(), "the clock moves to the run's end")
		assert.Len(t, order, 3)
	}
}

// TestVirtual_NextLiveSkipsSupersededWakeups: a wake-up an earlier one
// superseded stays queued and does nothing when it comes up; Next reports
// it, NextLive does not.
func TestVirtual_NextLiveSkipsSupersededWakeups(t *testing.T) {
	v := NewVirtual(newWorker(t, smallArgs(64)))
	v.schedule(0, 20)
	v.schedule(0, 10) // supersedes the one at 20
	require.NoError(t, v.RunUntil(10))
	at, _, ok := v.Next()
	require.True(t, ok)
	assert.Equal(t, 20.0, at, "the superseded wake-up is still queued")
	_, ok = v.NextLive()
	assert.False(t, ok, "an idle worker has nothing next")
	_, _, ok = v.Next()
	assert.False(t, ok, "NextLive dropped it")
}
