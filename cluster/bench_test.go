package cluster

import (
	"context"
	"testing"
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
