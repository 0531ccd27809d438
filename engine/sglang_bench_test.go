package engine

import "testing"

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
func BenchmarkVirtualClusterSGLang(b *testing.B) { benchAggregated(b, sglangBenchArgs()) }

// lpmBenchWorker is BenchmarkSGLangLPMPass's worker: an lpm SGLang worker
// (16-token pages, 1024 of them) whose tree holds a 2k-token prefix, with
// four requests decoding and 128 waiting 4k-token prompts that share the
// prefix. The waiting requests cannot be admitted: with maxRunning 4 no
// slot is free; otherwise a held request keeps so much of the pool that
// the budget left is short of a prompt's uncached half plus the prefix it
// locks, for the 200 passes before the benchmark rebuilds the worker.
func lpmBenchWorker(b *testing.B, maxRunning int) (*Worker, float64) {
	a := sglangBenchArgs()
	a.NumGPUBlocks = 1024
	a.SGLang.SchedulePolicy = SGLangPolicyLPM
	a.SGLang.ScheduleConservativeness = 0
	a.SGLang.ClipMaxNewTokens = 64
	a.SGLang.MaxRunningRequests = &maxRunning
	w, err := New(a, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	submit := func(now float64, id uint64, tokens []uint32, maxTokens int, policy CompletionPolicy) {
		if err := w.Submit(now, Request{ID: id, Tokens: tokens, MaxTokens: maxTokens}, policy); err != nil {
			b.Fatal(err)
		}
	}
	// settle runs passes until none is due, leaving hold deadlines alone.
	settle := func(now float64) float64 {
		for {
			at, ok := w.workWake()
			if !ok {
				return now
			}
			now = max(now, at)
			if out := w.Step(now); out != nil {
				now = max(now, out.End)
			}
		}
	}
	prefix := seqTokens(1, 2048)
	submit(0, 1, prefix, 1, Release)
	submit(0, 2, seqTokens(10_000_000, 772*16), 1, Hold)
	now := settle(0)
	for i := range 4 {
		submit(now, uint64(10+i), seqTokens(uint32(50000+100*i), 16), 4096, Release)
	}
	if out := w.Step(now); out == nil || len(out.Tokens) != 4 {
		b.Fatal("the four decoding requests were not admitted")
	} else {
		now = out.End
	}
	prompt := make([]uint32, 0, 4096)
	for i := range 128 {
		prompt = append(append(prompt[:0], prefix...), seqTokens(uint32(1_000_000+4096*i), 2048)...)
		submit(now, uint64(100+i), prompt, 2000, Release)
	}
	return w, now
}

// BenchmarkSGLangLPMPass measures one decode pass of four running
// requests while 128 requests that cannot be admitted wait under lpm,
// their prompts sharing a cached 2k-token prefix: with every running slot
// taken (slots_full), and with slots free but the budget short
// (budget_short), where the queue is still ordered every pass.
func BenchmarkSGLangLPMPass(b *testing.B) {
	for _, bc := range []struct {
		name       string
		maxRunning int
	}{
		{"slots_full", 4},
		{"budget_short", 256},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const rebuild = 200
			var (
				w   *Worker
				now float64
			)
			b.ReportAllocs()
			for i := range b.N {
				if i%rebuild == 0 {
					b.StopTimer()
					w, now = lpmBenchWorker(b, bc.maxRunning)
					b.StartTimer()
				}
				out := w.Step(now)
				if out == nil || len(out.Tokens) != 4 || out.PrefillTokens != 0 {
					b.Fatalf("pass %d: want a decode pass of the four running requests", i)
				}
				now = out.End
			}
		})
	}
}
