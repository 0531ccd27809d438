package cluster

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/kvstrand/mocker/internal/cputime"
)

// The benchmarks measure the cluster's own cost per request at a speedup
// high enough that modeled time is not what is measured.
func benchmarkGenerate(b *testing.B, cfg Config) {
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := c.Generate(context.Background(), Request{PromptTokens: 64, MaxTokens: 4}); r.Outcome != OutcomeCompleted {
				b.Errorf("outcome %s: %s", r.Outcome, r.Error)
			}
		}
	})
}

func BenchmarkGenerate_Aggregated(b *testing.B) {
	benchmarkGenerate(b, Config{Workers: 2, Args: map[string]any{"speedup_ratio": 10000}})
}

func BenchmarkGenerate_Disagg(b *testing.B) {
	benchmarkGenerate(b, Config{Disagg: true, Args: map[string]any{"speedup_ratio": 10000}})
}

// BenchmarkVirtualDisagg is the whole-cluster virtual speed: 2 prefill and
// 2 decode vLLM workers, 1,000-token prompts (varied, a quarter sharing a
// prefix) and 100 output tokens, full handoff through the in-memory link,
// arrivals faster than decode serves them so that holds queue and some
// abort. It reports simulated requests per CPU second of the whole
// process (sim_req/cpu_s), allocation per request, and the page faults per
// request (faults/op) the run took, in two regimes:
//
//   - steady: an arrival every 12 ms, about the fastest the cluster
//     serves in a steady state. Decode is saturated and about half the
//     holds abort, but the prefill queues stay short, so the cost per
//     request does not depend on b.N and any -benchtime compares. The
//     decode workers' preempted requests do pile up, waiting behind the
//     destinations that keep arriving (docs/fidelity.md §4), so requests
//     in flight grow through the run.
//   - overloaded: an arrival every 6.5 ms, which also outruns what the
//     holds' turnover lets the prefill workers admit. Their queues grow
//     through the run, every queued request keeps its records, and the
//     cost per request grows with b.N: compare versions at one fixed
//     -benchtime=Nx.
//
// The first run in a process takes its heap's pages from the kernel as it
// touches them, about a page fault per 4 KiB of what it allocates (half of
// it the results, a Result a request); a later run (-count) reuses them
// and faults almost never. How much CPU a fault costs is the machine's:
// under a microsecond on bare metal, ten or more in some virtual machines,
// where it is a sixth of the first run's time. faults/op tells the two
// apart; compare versions at the same -count.
//
// GAP_MS=x adds a run at that gap (GAP_MS=2 is deep saturation).
func BenchmarkVirtualDisagg(b *testing.B) {
	type regime struct {
		name string
		ms   float64
	}
	gaps := []regime{{"steady", 12}, {"overloaded", 6.5}}
	if v := os.Getenv("GAP_MS"); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || !(ms > 0) {
			b.Fatalf("GAP_MS=%q: want a positive number of modeled ms between arrivals", v)
		}
		gaps = append(gaps, regime{"gap=" + v + "ms", ms})
	}
	for _, g := range gaps {
		b.Run(g.name, func(b *testing.B) { benchmarkVirtualDisagg(b, g.ms) })
	}
}

func benchmarkVirtualDisagg(b *testing.B, gapMs float64) {
	const prompts = 256
	ring := make([][]uint32, prompts)
	for i := range ring {
		ring[i] = promptTokens(Request{PromptTokens: 1000, Prefix: []string{"a", "b", "c", "d"}[i%4], PrefixTokens: 250}, 9, uint64(i+1))
	}
	cfg := saturatedDisagg()
	arr := make([]Arrival, b.N)
	for i := range arr {
		// About 150 requests per modeled second: past what two decode
		// workers finish, so decode saturates and holds wait.
		arr[i] = Arrival{AtMs: float64(i) * gapMs, Request: Request{Tokens: ring[i%prompts], MaxTokens: 100}}
	}
	b.ReportAllocs()
	cpu0, faults0 := cputime.Self(), cputime.Faults()
	b.ResetTimer()
	run, err := RunVirtual(cfg, arr, VirtualOptions{})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if cpu := cputime.Self() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "sim_req/cpu_s")
	}
	b.ReportMetric(float64(cputime.Faults()-faults0)/float64(b.N), "faults/op")
	s := run.Stats
	if s.Errored > 0 || s.Completed == 0 {
		b.Fatalf("completed %d, errored %d", s.Completed, s.Errored)
	}
	b.ReportMetric(float64(s.Aborted)/float64(b.N)*100, "%aborted")
}

// saturatedDisagg is BenchmarkVirtualDisagg's cluster: 2 prefill and 2
// decode vLLM workers of 4,096 blocks, a 2 s abort timeout and a modeled
// transfer, which arrivals faster than decode serves saturate.
func saturatedDisagg() Config {
	return Config{Disagg: true, Router: "kv", Seed: 1,
		Args: map[string]any{"num_gpu_blocks": 4096, "max_num_seqs": 64,
			"kv_transfer_abort_timeout_ms": 2000, "kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25},
		Prefill: PoolConfig{Workers: 2}, Decode: PoolConfig{Workers: 2}}
}
