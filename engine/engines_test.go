package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// sglangArgs is an SGLang worker with 4-token pages and a pool of n pages,
// the twin of smallArgs.
func sglangArgs(n int, mod ...func(*Args)) Args {
	a := DefaultArgs()
	a.EngineType = EngineSGLang
	a.BlockSize = 4
	a.NumGPUBlocks = n
	sg := DefaultSGLangArgs()
	sg.PageSize = 4
	a.SGLang = &sg
	for _, f := range mod {
		f(&a)
	}
	return a
}

// trtllmArgs is a TensorRT-LLM worker (the vLLM core under
// guaranteed_no_evict) with 4-token blocks and a pool of n blocks.
func trtllmArgs(n int, mod ...func(*Args)) Args {
	a := smallArgs(n)
	a.EngineType = EngineTRTLLM
	t := DefaultTRTLLMArgs()
	a.TRTLLM = &t
	for _, f := range mod {
		f(&a)
	}
	return a
}

// engineCase is one row of the engine table: how to build its args.
type engineCase struct {
	name string
	args func(n int, mod ...func(*Args)) Args
}

// engines runs the shared suites against every scheduler. The SGLang row is
// optimistic, so a Hold prefill computes at once and holds like vLLM's; the
// destination-first ordering has its own tests.
var engines = []engineCase{
	{"vllm", smallArgs},
	{"sglang", func(n int, mod ...func(*Args)) Args {
		return sglangArgs(n, append([]func(*Args){func(a *Args) { a.SGLang.OptimisticPrefill = true }}, mod...)...)
	}},
	{"trtllm", trtllmArgs},
}

func asPrefill(a *Args) { a.WorkerType = WorkerPrefill }

func TestEngines_StrandingFillsPool(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(8, asPrefill))
			var r record
			// Two held 15-token prefills fill all 8 blocks of 4 (with
			// their one output token: trtllm sets aside 16 tokens each).
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 15), MaxTokens: 1}, Hold))
			require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(200, 15), MaxTokens: 1}, Hold))
			now := driveAny(t, w, &r, 0, false)
			require.Len(t, r.eventsOf(EventHoldStarted), 2)
			m := w.Metrics()
			assert.Equal(t, 8, m.ActiveBlocks, "capacity view counts held blocks")
			assert.Equal(t, 8, m.HeldBlocks)
			assert.Zero(t, m.RouterActiveBlocks, "router view leaves held blocks out")
			assert.Equal(t, 2, m.HeldRequests)
			assert.Zero(t, m.Running)

			// The next prefill waits and the worker has no pass to run.
			require.NoError(t, w.Submit(now, Request{ID: 3, Tokens: seqTokens(300, 8), MaxTokens: 1}, Hold))
			passes := w.Passes()
			now = driveAny(t, w, &r, now, false)
			_, ok := w.workWake()
			assert.False(t, ok, "a worker stuck behind held KV has nothing to run")
			assert.Equal(t, passes, w.Passes())
			assert.Equal(t, 1, w.Metrics().Waiting)
			_, done := r.completion(3)
			assert.False(t, done)

			// Releasing one hold lets it run; releasing all empties the pool.
			require.True(t, w.ReleaseHeld(now+10, 1, Transferred))
			now = driveAny(t, w, &r, now+10, false)
			_, done = r.completion(3)
			assert.True(t, done)
			require.True(t, w.ReleaseHeld(now+1, 2, Aborted))
			require.True(t, w.ReleaseHeld(now+2, 3, Transferred))
			driveAny(t, w, &r, now+2, false)
			m = w.Metrics()
			assert.Zero(t, m.ActiveBlocks)
			assert.Zero(t, m.HeldBlocks)
			assert.Zero(t, m.HeldRequests)
			assert.Len(t, r.eventsOf(EventHoldReleased), 3)
		})
	}
}

func TestEngines_RouterLoadIncludesHeld(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			for _, include := range []bool{false, true} {
				w := newWorker(t, e.args(8, asPrefill, func(a *Args) { a.RouterLoadIncludesHeld = include }))
				var r record
				require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(100, 16), MaxTokens: 1}, Hold))
				driveAny(t, w, &r, 0, false)
				m := w.Metrics()
				assert.Equal(t, 4, m.HeldBlocks)
				want := 0
				if include {
					want = 4
				}
				assert.Equal(t, want, m.RouterActiveBlocks, "router_load_includes_held=%v", include)
			}
		})
	}
}

func TestEngines_AggregatedNeverHolds(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(64))
			var r record
			for i := range 5 {
				require.NoError(t, w.Submit(0, Request{ID: uint64(i), Tokens: seqTokens(uint32(100*i), 9), MaxTokens: 3}, Release))
			}
			now := driveAny(t, w, &r, 0, true)
			require.Len(t, r.completions, 5)
			for _, c := range r.completions {
				assert.False(t, c.Held)
				assert.Equal(t, 3, c.OutputTokens)
			}
			assert.Empty(t, r.eventsOf(EventHoldStarted))
			assert.Zero(t, w.Metrics().HeldRequests)
			assert.Zero(t, w.Metrics().ActiveBlocks)
			assert.False(t, w.ReleaseHeld(now, 0, Transferred), "nothing to release for an aggregated request")
		})
	}
}

func TestEngines_ReleaseIdempotent(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(16, asPrefill))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 7, Tokens: seqTokens(1, 9), MaxTokens: 1}, Hold))
			now := driveAny(t, w, &r, 0, false)
			start := r.eventsOf(EventHoldStarted)
			require.Len(t, start, 1)
			assert.Equal(t, 3, start[0].Blocks)

			assert.True(t, w.ReleaseHeld(now+25, 7, Aborted))
			assert.False(t, w.ReleaseHeld(now+30, 7, Aborted))
			assert.False(t, w.ReleaseHeld(now+30, 7, Transferred))
			assert.False(t, w.Cancel(now+30, 7))
			driveAny(t, w, &r, now+30, true)
			end := r.eventsOf(EventHoldReleased)
			require.Len(t, end, 1)
			assert.Equal(t, Aborted, end[0].Outcome)
			assert.Equal(t, now+25, end[0].At)
			assert.InDelta(t, 25, end[0].DurationMs, 1e-9, "the hold lasts from the prefill's end to the release")
			assert.Zero(t, w.Metrics().ActiveBlocks)
		})
	}
}

func TestEngines_CancelEverywhere(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(64, func(a *Args) { a.MaxNumSeqs = intp(1) }))
			var r record
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 9), MaxTokens: 50}, Release))
			require.NoError(t, w.Submit(0, Request{ID: 2, Tokens: seqTokens(50, 9), MaxTokens: 50}, Release))
			out := step(t, w, &r, 0)
			assert.Equal(t, 1, w.Metrics().Running)
			assert.True(t, w.Cancel(out.End, 2), "waiting")
			assert.True(t, w.Cancel(out.End, 1), "running")
			assert.False(t, w.Cancel(out.End, 1))
			driveAny(t, w, &r, out.End, true)
			assert.Len(t, r.eventsOf(EventCancelled), 2)
			assert.Zero(t, w.Metrics().ActiveBlocks)
			assert.False(t, w.Scheduler().HasWork())
		})
	}
}

// TestEngines_BlockAndRequestConservation runs random schedules against
// both engines: arrivals with shared prefixes under both policies, holds,
// releases, cancellations, transfers and (on workers that may be
// destinations) reservations, activations and destination cancellations,
// plus, for SGLang, both handoff orderings. After every input or step the
// pool is recounted and active + inactive + free == total; at the end every
// request ended exactly once and the pool drained (held = reserved =
// active = 0).
func TestEngines_BlockAndRequestConservation(t *testing.T) {
	for _, e := range []string{"vllm", "sglang", "trtllm", "trtllm-max_utilization"} {
		t.Run(e, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { conservationRun(rt, e) })
		})
	}
}

func conservationRun(rt *rapid.T, engine string) {
	wt := rapid.SampledFrom([]WorkerType{WorkerAggregated, WorkerPrefill, WorkerDecode}).Draw(rt, "worker_type")
	blocks := rapid.IntRange(4, 40).Draw(rt, "blocks")
	mod := func(a *Args) {
		a.WorkerType = wt
		a.EnablePrefixCaching = rapid.Bool().Draw(rt, "caching")
		a.EnableChunkedPrefill = rapid.Bool().Draw(rt, "chunked")
		a.MaxNumBatchedTokens = intp(rapid.IntRange(8, 64).Draw(rt, "budget"))
		a.MaxNumSeqs = intp(rapid.IntRange(1, 8).Draw(rt, "seqs"))
		a.HandoffSessionTimeoutMs = int64(rapid.IntRange(50, 2000).Draw(rt, "session_ms"))
		if rapid.Bool().Draw(rt, "abort_timeout") {
			ms := int64(rapid.IntRange(1, 500).Draw(rt, "abort_ms"))
			a.KVTransferAbortTimeoutMs = &ms
		}
		bw, bpt := 1.0, 1_000_000
		a.KVTransferBandwidth, a.KVBytesPerToken = &bw, &bpt
		// A host tier on a third of the vLLM-model runs with a prefix
		// cache, its copies timed (their GPU slots lent until they land)
		// or not: a 4 MB block takes 80, 4 or 0.29 ms, or none.
		if engine != "sglang" && a.EnablePrefixCaching && rapid.IntRange(0, 2).Draw(rt, "g2") == 0 {
			a.NumG2Blocks = rapid.IntRange(1, 48).Draw(rt, "g2_blocks")
			a.BandwidthG1ToG2 = new(rapid.SampledFrom([]float64{0.05, 1, 14, 0}).Draw(rt, "g1_to_g2_gbps"))
			a.OffloadBatchSize = rapid.IntRange(0, 4).Draw(rt, "offload_batch")
		}
		// Both reservation rules, and Dynamo's timing and queue rules.
		a.ReserveTakesSlot = rapid.Bool().Draw(rt, "reserve_takes_slot")
		a.DynamoCompat = rapid.Bool().Draw(rt, "dynamo_compat")
		if a.SGLang != nil {
			a.SGLang.OptimisticPrefill = rapid.Bool().Draw(rt, "optimistic")
			a.SGLang.SchedulePolicy = rapid.SampledFrom([]string{SGLangPolicyFIFO, SGLangPolicyLPM}).Draw(rt, "policy")
			a.SGLang.ChunkedPrefillSize = 4 * rapid.IntRange(1, 6).Draw(rt, "chunk_pages")
			a.SGLang.MaxPrefillTokens = rapid.IntRange(4, 40).Draw(rt, "max_prefill")
			a.SGLang.ClipMaxNewTokens = rapid.IntRange(1, 8).Draw(rt, "clip")
			a.SGLang.ScheduleConservativeness = rapid.Float64Range(0, 1).Draw(rt, "conservativeness")
		}
	}
	var args Args
	switch engine {
	case "sglang":
		args = sglangArgs(blocks, mod)
	case "trtllm":
		args = trtllmArgs(blocks, mod)
	case "trtllm-max_utilization":
		args = trtllmArgs(blocks, mod, func(a *Args) { a.TRTLLM.CapacitySchedulerPolicy = TRTLLMMaxUtilization })
	default:
		args = smallArgs(blocks, mod)
	}
	w, err := New(args, nil, 3)
	if err != nil {
		rt.Fatal(err)
	}
	var r record
	submitted := map[uint64]string{}
	now := 0.0
	nextID := uint64(0)
	pick := func(label string) uint64 { return uint64(rapid.IntRange(0, int(nextID)-1).Draw(rt, label)) }
	newReq := func() Request {
		prefix := seqTokens(uint32(1000*rapid.IntRange(0, 2).Draw(rt, "prefix")), rapid.IntRange(0, 12).Draw(rt, "plen"))
		tail := seqTokens(uint32(100000+int(nextID)*100), rapid.IntRange(1, 20).Draw(rt, "tlen"))
		return Request{ID: nextID, Tokens: append(prefix, tail...), MaxTokens: rapid.IntRange(1, 8).Draw(rt, "max"),
			Priority: rapid.IntRange(0, 2).Draw(rt, "priority")}
	}
	steps := rapid.IntRange(1, 80).Draw(rt, "steps")
	for range steps {
		now += rapid.Float64Range(0, 20).Draw(rt, "dt")
		switch rapid.IntRange(0, 9).Draw(rt, "action") {
		case 0, 1:
			pol := rapid.SampledFrom([]CompletionPolicy{Release, Hold}).Draw(rt, "policy")
			if err := w.Submit(now, newReq(), pol); err != nil {
				rt.Fatal(err)
			}
			submitted[nextID] = "submit"
			nextID++
		case 2:
			if wt == WorkerPrefill {
				continue
			}
			if err := w.Reserve(now, newReq()); err != nil {
				rt.Fatal(err)
			}
			submitted[nextID] = "reserve"
			nextID++
		case 3:
			if nextID > 0 {
				w.ReleaseHeld(now, pick("release"), Transferred)
			}
		case 4:
			if nextID > 0 {
				w.Cancel(now, pick("cancel"))
			}
		case 5:
			if nextID > 0 {
				w.StartTransfer(now, pick("transfer"), rapid.IntRange(0, 40).Draw(rt, "ttokens"))
			}
		case 6:
			if nextID > 0 {
				w.Activate(now, pick("activate"))
			}
		case 7:
			if nextID > 0 {
				w.CancelDestination(now, pick("cancel_dest"))
			}
		case 8:
			if nextID > 0 {
				w.DestinationReady(now, pick("ready"), rapid.IntRange(0, 40).Draw(rt, "rtokens"))
			}
		default:
			if at, ok := w.NextWake(); ok {
				now = max(now, at)
				if out := w.Step(now); out != nil {
					r.add(out)
					now = max(now, out.End)
				}
			}
		}
		checkWorker(rt, w)
	}
	// Drain: activate reservations, release holds, let deadlines fire,
	// until nothing is left.
	for range 1000 {
		now = driveAny(rt, w, &r, now, true)
		moved := 0
		for id := range submitted {
			if w.Activate(now, id) || w.ReleaseHeld(now, id, Aborted) {
				moved++
			}
		}
		m := w.Metrics()
		if moved == 0 && !w.Scheduler().HasWork() && m.Waiting == 0 && m.ReservedRequests == 0 {
			break
		}
		if moved == 0 && args.DynamoCompat && engine == "sglang" {
			cancelStalled(rt, w, now)
		}
	}
	// The last round's inputs may have left events pending (a release, or
	// a deadline they fired): flush them before counting.
	driveAny(rt, w, &r, now, true)
	m := w.Metrics()
	if w.Scheduler().HasWork() || m.Waiting != 0 {
		rt.Fatalf("worker did not drain: %+v", m)
	}

	ended := map[uint64]string{}
	mark := func(id uint64, how string) {
		if prev, dup := ended[id]; dup {
			rt.Fatalf("request %d ended twice: %s then %s", id, prev, how)
		}
		ended[id] = how
	}
	for _, c := range r.completions {
		mark(c.RequestID, "completed")
	}
	for _, rj := range r.rejections {
		mark(rj.RequestID, "rejected")
	}
	for _, e := range r.eventsOf(EventCancelled) {
		mark(e.RequestID, "cancelled")
	}
	for _, e := range r.eventsOf(EventDestinationCancelled) {
		if ended[e.RequestID] == "rejected" {
			continue // a rejected destination's wait is closed as well
		}
		mark(e.RequestID, "destination cancelled")
	}
	if len(ended) != len(submitted) {
		rt.Fatalf("submitted %d, ended %d: %v", len(submitted), len(ended), ended)
	}
	if s, e := len(r.eventsOf(EventHoldStarted)), len(r.eventsOf(EventHoldReleased)); s != e {
		rt.Fatalf("holds started %d, released %d", s, e)
	}
	if m.ActiveBlocks != lentBlocks(w) || m.HeldBlocks != 0 || m.HeldRequests != 0 || m.ReservedBlocks != 0 || m.ReservedRequests != 0 {
		rt.Fatalf("after drain: %+v", m)
	}
}

// lentBlocks is how many of w's GPU slots are lent to copies to its host
// tier not yet landed: taken, though no request holds them.
func lentBlocks(w *Worker) int {
	if v, ok := w.Scheduler().(*VLLM); ok {
		return len(v.pool.lent)
	}
	return 0
}

// cancelStalled ends the request an SGLang worker under dynamo_compat is
// stuck on, once nothing else moves: as in Dynamo, a request that can
// never complete is not refused, and it stalls, running alone in a full
// pool or waiting at the head of the queue, until it is cancelled. The
// request must be one whose page-rounded length plus clipped remaining
// output reaches the pool, the only kind Dynamo's budget can leave stuck
// on an otherwise empty worker.
func cancelStalled(rt *rapid.T, w *Worker, now float64) {
	g := sgOf(w)
	var r *sgReq
	switch {
	case len(g.running) > 0:
		r = g.running[0]
	case len(g.waiting) > 0:
		r = g.waiting[0]
	default:
		return
	}
	if need := ceilDiv(r.length, g.page)*g.page + min(r.maxOut-r.out, g.clip); need < g.total*g.page {
		rt.Fatalf("request %d stalled but fits: %d of %d tokens (%+v)", r.id, need, g.total*g.page, w.Metrics())
	}
	w.Cancel(now, r.id)
}

func TestEngines_Determinism(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			a, _ := runCluster(t, e.args, 42, 200)
			b, _ := runCluster(t, e.args, 42, 200)
			require.NotEmpty(t, a)
			assert.Equal(t, a, b, "same seed and inputs give byte-identical logs")
			assert.Contains(t, a, " kv ", "the log includes KV events")
			c, _ := runCluster(t, e.args, 43, 200)
			assert.NotEqual(t, a, c, "the log depends on the seed")
		})
	}
}

// TestEngines_ParksWhenOnlyHeld: a worker whose only state is held KV
// needs no attention until the hold's session deadline: its next wake-up is
// that deadline, and stepping it before then runs no pass.
func TestEngines_ParksWhenOnlyHeld(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			w := newWorker(t, e.args(32, asPrefill))
			require.NoError(t, w.Submit(0, Request{ID: 1, Tokens: seqTokens(1, 20), MaxTokens: 1}, Hold))
			var held bool
			for now := 0.0; !held; {
				out := w.Step(now)
				if out != nil {
					for _, c := range out.Completions {
						held = held || c.Held
					}
					now = out.End
				}
				wake, ok := w.NextWake()
				require.True(t, ok, "a hold has a session deadline")
				now = max(now, wake)
			}
			passes := w.Passes()
			wake, ok := w.NextWake()
			require.True(t, ok)
			assert.Greater(t, wake, 1000.0, "only the session deadline is left")
			for _, at := range []float64{wake / 4, wake / 2, wake - 1} {
				w.Step(at)
				assert.Equal(t, passes, w.Passes(), "no pass while only KV is held")
			}
			m := w.Metrics()
			assert.Equal(t, 5, m.HeldBlocks)
			assert.Zero(t, m.Running)
			assert.True(t, w.Apply(wake-1, ReleaseHeld{ID: 1, Outcome: Transferred}).OK)
			assert.False(t, w.Apply(wake-1, ReleaseHeld{ID: 1, Outcome: Transferred}).OK, "release is idempotent")
			rel := w.Step(wake - 1)
			require.NotNil(t, rel)
			assert.Equal(t, EventHoldReleased, rel.Events[0].Kind)
			assert.Equal(t, passes, w.Passes(), "flushing the release event is not a pass")
			assert.Zero(t, w.Metrics().ActiveBlocks)
		})
	}
}
