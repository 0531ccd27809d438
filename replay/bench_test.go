package replay

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/internal/cputime"
)

// The replay benchmarks measure what `mocker replay` costs per request of
// a trace, parse, cluster and summary together, on 2 prefill and 2 decode
// vLLM workers with a modeled KV handoff, arrivals fast enough that decode
// saturates and holds queue and abort. They report simulated requests per
// CPU second of the process (sim_req/cpu_s), the figure issue targets are
// stated in, beside the share of requests aborted and the prefix-cache hit
// rate, so that a change that moves the model shows. The trace is written
// to memory before the timer starts. Compare versions at one fixed
// -benchtime=Nx: a saturated cluster's queues, and so the cost per
// request, grow a little with the run.

// BenchmarkReplay_LongPrompts replays a Mooncake-shaped trace: prompts of
// 4k to 12k tokens (about 8k) in 512-token hash blocks, and 100 to 500
// output tokens. Every prompt starts with a system prompt two blocks long;
// most continue one of 64 conversations, repeating its history (which
// grows turn by turn) before blocks of their own.
func BenchmarkReplay_LongPrompts(b *testing.B) {
	benchReplay(b, longTrace(b.N), longCluster())
}

// BenchmarkReplay_ShortPrompts replays 1,000-token prompts (two 512-token
// hash blocks, a quarter of them sharing their first with one of four
// others) with 100 output tokens, an arrival every 12 modeled ms.
func BenchmarkReplay_ShortPrompts(b *testing.B) {
	benchReplay(b, shortTrace(b.N), disagg())
}

// longCluster is the long-prompt benchmark's cluster: pools of 16,384
// 16-token blocks (262k tokens, a large GPU's), room for a few dozen
// Mooncake prompts a worker.
func longCluster() cluster.Config {
	cfg := disagg()
	cfg.Args["num_gpu_blocks"] = 16384
	return cfg
}

func benchReplay(b *testing.B, trace []byte, cfg cluster.Config) {
	b.ReportAllocs()
	cpu0 := cputime.Self()
	b.ResetTimer()
	tr, err := NewReader(bytes.NewReader(trace))
	if err != nil {
		b.Fatal(err)
	}
	out, err := Run(cfg, tr, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var sum bytes.Buffer
	if err := out.Summary.WriteJSON(&sum); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if cpu := cputime.Self() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "sim_req/cpu_s")
	}
	s := out.Summary
	if s.Requests != uint64(b.N) || s.Completed == 0 || s.Errored > 0 {
		b.Fatalf("requests %d of %d, completed %d, errored %d", s.Requests, b.N, s.Completed, s.Errored)
	}
	b.ReportMetric(float64(s.Aborted)/float64(b.N)*100, "%aborted")
	b.ReportMetric(s.PrefixCacheHitRate*100, "%hit")
}

// longTrace is n rows of BenchmarkReplay_LongPrompts's trace.
func longTrace(n int) []byte {
	gapMs := 80.0
	if v, err := strconv.ParseFloat(os.Getenv("GAP_MS"), 64); err == nil {
		gapMs = v
	}
	const (
		convs  = 64
		block  = DefaultBlockSize
		system = 2
	)
	rng := rand.New(rand.NewPCG(7, 39))
	turns := make([]int, convs)
	var buf bytes.Buffer
	ids := make([]uint64, 0, 32)
	next := uint64(1 << 20) // a request's own blocks
	for i := range n {
		ids = ids[:0]
		for k := range system {
			ids = append(ids, uint64(k))
		}
		blocks := 8 + rng.IntN(17) // 4k to 12k tokens
		if c := rng.IntN(convs + convs/4); c < convs {
			// A conversation's turn repeats its history, 3 blocks a turn
			// before it, up to the prompt's length.
			hist := min(3*turns[c], blocks-system-1)
			for k := range hist {
				ids = append(ids, uint64(1000*(c+1)+k))
			}
			turns[c]++
		}
		for len(ids) < blocks {
			ids = append(ids, next)
			next++
		}
		in := blocks*block - rng.IntN(block)
		out := 100 + rng.IntN(401)
		buf.WriteString(traceLine(float64(i)*gapMs, in, out, ids))
	}
	return buf.Bytes()
}

// shortTrace is n rows of BenchmarkReplay_ShortPrompts's trace.
func shortTrace(n int) []byte {
	var buf bytes.Buffer
	ids := make([]uint64, 2)
	for i := range n {
		ids[0], ids[1] = uint64(1<<20+2*i), uint64(1<<20+2*i+1)
		if i%4 == 0 {
			ids[0] = uint64(i / 4 % 4)
		}
		buf.WriteString(traceLine(float64(i)*12, 1000, 100, ids))
	}
	return buf.Bytes()
}

func traceLine(ts float64, in, out int, ids []uint64) string {
	b := make([]byte, 0, 96+8*len(ids))
	b = append(b, `{"timestamp": `...)
	b = strconv.AppendFloat(b, ts, 'g', -1, 64)
	b = append(b, `, "input_length": `...)
	b = strconv.AppendInt(b, int64(in), 10)
	b = append(b, `, "output_length": `...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `, "hash_ids": [`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendUint(b, id, 10)
	}
	b = append(b, "]}\n"...)
	return string(b)
}
