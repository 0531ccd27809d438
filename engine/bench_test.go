package engine

import (
	"math/rand/v2"
	"testing"
	"time"
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
func BenchmarkVirtualCluster(b *testing.B) {
	const (
		workers  = 4
		isl      = 100
		osl      = 50
		interval = 2.5
	)
	ws := make([]*Worker, workers)
	for i := range ws {
		w, err := New(benchArgs(), nil, uint64(i))
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
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := v.Run(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if completed != b.N {
		b.Fatalf("completed %d of %d requests", completed, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sim_req/s")
	b.ReportMetric(v.Now()/float64(b.N), "modeled_ms/req")
}
