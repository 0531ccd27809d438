package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvstrand/mocker/internal/cputime"
)

// benchArgs are the engine args of BenchmarkVirtualCluster: a vLLM worker
// with 16-token blocks and a pool far larger than the running set, so the
// benchmark measures the scheduler and pool, not a queue that never drains.
func benchArgs() Args {
	a := DefaultArgs()
	a.BlockSize = 16
	a.NumGPUBlocks = 8192
	return a
}

// BenchmarkVirtualCluster simulates b.N requests (100 prompt tokens, 50
// output tokens, one arrival every 2.5 modeled ms, round-robin) over four
// aggregated vLLM workers on the virtual clock.
func BenchmarkVirtualCluster(b *testing.B) { benchAggregated(b, benchArgs()) }

// BenchmarkVirtualClusterTRTLLM is BenchmarkVirtualCluster on the trtllm
// engine under guaranteed_no_evict, whose admission asks what the running
// set may still take (a sum kept as requests run, not a walk).
func BenchmarkVirtualClusterTRTLLM(b *testing.B) {
	a := benchArgs()
	a.EngineType = EngineTRTLLM
	t := DefaultTRTLLMArgs()
	a.TRTLLM = &t
	benchAggregated(b, a)
}

// benchAggregated is the virtual-cluster benchmark for any engine: b.N
// requests of 100 prompt and 50 output tokens, one every 2.5 modeled ms,
// round-robin over four aggregated workers built from args.
func benchAggregated(b *testing.B, args Args) {
	const (
		workers  = 4
		isl      = 100
		osl      = 50
		interval = 2.5
	)
	ws := make([]*Worker, workers)
	for i := range ws {
		w, err := New(args, nil, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	v := NewVirtual(ws...)
	completed := 0
	v.OnOutput = func(_ int, out *Output) { completed += len(out.Completions) }
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]uint32, isl)
	n := 0
	v.Feed(func() (Arrival, bool) {
		if n == b.N {
			return Arrival{}, false
		}
		for i := range prompt {
			prompt[i] = rng.Uint32N(50000)
		}
		a := Arrival{At: float64(n) * interval, Worker: n % workers,
			Request: Request{ID: uint64(n), Tokens: prompt, MaxTokens: osl}}
		n++
		return a, true
	})
	measure(b, v, func() {
		if completed != b.N {
			b.Fatalf("completed %d of %d requests", completed, b.N)
		}
	})
}

// measure runs v with the timer on and allocations reported, has check
// vet the outcome, and reports the simulation's speed (sim_req/s, and
// sim_req/cpu_s per CPU second of the process, the steadier figure on a
// shared machine) and the modeled time per request (modeled_ms/req).
func measure(b *testing.B, v *Virtual, check func()) {
	b.Helper()
	b.ReportAllocs()
	cpu0 := cputime.Self()
	b.ResetTimer()
	start := time.Now()
	if err := v.Run(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cputime.Self() - cpu0
	check()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sim_req/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "sim_req/cpu_s")
	}
	b.ReportMetric(v.Now()/float64(b.N), "modeled_ms/req")
}

// BenchmarkVirtualDisagg simulates b.N requests (100 prompt tokens, 50
// output tokens, one arrival every 10 modeled ms) through the whole handoff
// lifecycle on one prefill and one decode worker on the virtual clock:
// prefill and hold, reservation on the decode side, transfer
// (destination_missing, 0.2 ms for a 100-token prompt), release, activation
// and decode.
func BenchmarkVirtualDisagg(b *testing.B) {
	const (
		isl      = 100
		osl      = 50
		interval = 10
		ring     = 1 << 13 // prompts kept until their reservation fires
	)
	const P, D = 0, 1
	pa, da := benchArgs(), benchArgs()
	pa.WorkerType, da.WorkerType = WorkerPrefill, WorkerDecode
	pa.KVBytesPerToken = intp(100_000)
	pa.KVTransferBandwidth = float64p(50)
	pa.KVTransferTimingMode = TransferDestinationMissing
	pa.KVTransferAbortTimeoutMs = int64p(60_000)
	pre, err := New(pa, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	dec, err := New(da, nil, 2)
	if err != nil {
		b.Fatal(err)
	}
	v := NewVirtual(pre, dec)
	prompts := make([][]uint32, ring)
	for i := range prompts {
		prompts[i] = make([]uint32, isl)
	}
	inFlight, completed, aborted := 0, 0, 0
	v.OnOutput = func(w int, out *Output) {
		for i := range out.Events {
			e := &out.Events[i]
			switch e.Kind {
			case EventHoldStarted:
				v.Schedule(v.Now(), D, &Reserve{Request: Request{ID: e.RequestID, Tokens: prompts[e.RequestID%ring], MaxTokens: osl}})
			case EventDecodeReserved:
				v.Schedule(v.Now(), P, StartTransfer{ID: e.RequestID, Tokens: TransferTokens(pa.KVTransferTimingMode, isl, e.MissingTokens)})
			case EventHoldReleased:
				if e.Outcome == Aborted {
					aborted++
				}
			}
		}
		if w == D {
			completed += len(out.Completions)
			inFlight -= len(out.Completions)
		}
	}
	v.OnInput = func(r InputResult) {
		if st, ok := r.Input.(StartTransfer); ok && r.Reply.OK {
			v.Schedule(r.At+r.Reply.DelayMs, D, Activate{ID: st.ID})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	v.Feed(func() (Arrival, bool) {
		if n == b.N {
			return Arrival{}, false
		}
		if inFlight >= ring {
			panic("BenchmarkVirtualDisagg: more requests in flight than the prompt ring holds")
		}
		prompt := prompts[n%ring]
		for i := range prompt {
			prompt[i] = rng.Uint32N(50000)
		}
		a := Arrival{At: float64(n) * interval, Worker: P, Policy: Hold,
			Request: Request{ID: uint64(n), Tokens: prompt, MaxTokens: osl}}
		n++
		inFlight++
		return a, true
	})
	measure(b, v, func() {
		if completed != b.N || aborted != 0 {
			b.Fatalf("completed %d of %d requests, %d aborted", completed, b.N, aborted)
		}
		for i, w := range []*Worker{pre, dec} {
			if m := w.Metrics(); m.HeldRequests+m.ReservedRequests+m.ActiveBlocks != 0 {
				b.Fatalf("worker %d did not drain: %+v", i, m)
			}
		}
	})
}
