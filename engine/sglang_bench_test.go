package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// sglangBenchArgs are BenchmarkVirtualCluster's args for the SGLang model:
// 16-token pages and the same 8192-page pool.
func sglangBenchArgs() Args {
	a := benchArgs()
	a.EngineType = EngineSGLang
	sg := DefaultSGLangArgs()
	sg.PageSize = a.BlockSize
	a.SGLang = &sg
	return a
}

// BenchmarkVirtualClusterSGLang is BenchmarkVirtualCluster over four
// aggregated SGLang workers: b.N requests of 100 prompt and 50 output
// tokens, one every 2.5 modeled ms, round-robin.
func BenchmarkVirtualClusterSGLang(b *testing.B) {
	const (
		workers  = 4
		isl      = 100
		osl      = 50
		interval = 2.5
	)
	ws := make([]*Worker, workers)
	for i := range ws {
		w, err := buildWorker(sglangBenchArgs(), uint64(i))
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
