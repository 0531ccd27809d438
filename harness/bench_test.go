package harness

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/grafana/sobek"
)

// BenchmarkEmptyIteration compares one harness iteration of an empty
// default function (2 VUs, shared-iterations) with a bare sobek call of an
// empty function. The harness sub-benchmark reports its ratio to the bare
// call ("x-bare") and iterations per second.
func BenchmarkEmptyIteration(b *testing.B) {
	var bareNs float64
	b.Run("BareSobekCall", func(b *testing.B) {
		rt := sobek.New()
		if _, err := rt.RunString(`function empty() {}`); err != nil {
			b.Fatal(err)
		}
		fn, _ := sobek.AssertFunction(rt.Get("empty"))
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := fn(sobek.Undefined()); err != nil {
				b.Fatal(err)
			}
		}
		bareNs = float64(time.Since(start).Nanoseconds()) / float64(b.N)
		b.ReportMetric(bareNs, "ns/iteration")
	})
	b.Run("HarnessIteration", func(b *testing.B) {
		dir := b.TempDir()
		script := filepath.Join(dir, "empty.js")
		if err := os.WriteFile(script, []byte(`export default function () {}`), 0o644); err != nil {
			b.Fatal(err)
		}
		n := int64(max(b.N, 2))
		var took time.Duration
		cfg := Config{
			Script: script, Quiet: true, Stdout: io.Discard, Stderr: io.Discard, Clock: ClockWall,
			Overrides:  Overrides{VUs: ptr(int64(2)), Iterations: &n},
			observeRun: func(d time.Duration) { took = d },
		}
		b.ReportAllocs()
		b.ResetTimer()
		if err := Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
		perIter := float64(took.Nanoseconds()) / float64(n)
		b.ReportMetric(perIter, "ns/iteration")
		b.ReportMetric(1e9/perIter, "iterations/s")
		if bareNs > 0 {
			b.ReportMetric(perIter/bareNs, "x-bare")
		}
	})
}

func ptr[T any](v T) *T { return &v }
