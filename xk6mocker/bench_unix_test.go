//go:build unix

package xk6mocker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/internal/cputime"
)

// BenchmarkVirtualQuickstart runs scripts/quickstart.js on the virtual
// clock through the whole harness — JavaScript VUs, metrics, thresholds,
// the stepped cluster — for one modeled minute of its shape (ramping to 16
// VUs past decode saturation, holds aborting) per b.N, and reports
// simulated requests per CPU second and virtual seconds per wall second.
func BenchmarkVirtualQuickstart(b *testing.B) {
	benchVirtual(b, filepath.Join("..", "scripts", "quickstart.js"))
}

// BenchmarkVirtualAggregated is BenchmarkVirtualQuickstart's load on four
// aggregated workers (testdata/bench_aggregated.js): no holds, no
// transfers, so the harness's share of a request weighs more.
func BenchmarkVirtualAggregated(b *testing.B) {
	benchVirtual(b, filepath.Join("testdata", "bench_aggregated.js"))
}

// benchVirtual runs script for a modeled minute with 16 VUs per b.N and
// reports CPU time and heap allocation per simulated request (allocation
// counts are steadier than CPU time on a shared host).
func benchVirtual(b *testing.B, script string) {
	script, err := filepath.Abs(script)
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("GOGC") == "" {
		// What `mocker run` pays: cmd/mocker runs with GOGC=400 unless
		// GOGC says otherwise.
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	var requests uint64
	var virtual time.Duration
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	cpu0, wall0 := cputime.Self(), time.Now()
	for b.Loop() {
		var stdout, stderr bytes.Buffer
		cfg := harness.Config{
			Script: script, Env: map[string]string{"DURATION": "60s", "VUS": "16"},
			Quiet: true, NoColor: true, Stdout: &stdout, Stderr: &stderr, Clock: harness.ClockVirtual,
		}
		beforeClose = func(_ string, c *cluster.Cluster) { requests += c.Stats().Requests }
		if err := harness.Run(context.Background(), cfg); err != nil {
			b.Fatalf("%v\n%s", err, stderr.String())
		}
		closing.Wait()
		virtual += time.Minute
	}
	beforeClose = nil
	cpu, wall := cputime.Self()-cpu0, time.Since(wall0)
	runtime.ReadMemStats(&mem1)
	b.ReportMetric(float64(requests)/cpu.Seconds(), "sim_req/CPU-s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(requests), "CPU-µs/req")
	b.ReportMetric(virtual.Seconds()/wall.Seconds(), "virtual-s/wall-s")
	b.ReportMetric(float64(mem1.TotalAlloc-mem0.TotalAlloc)/float64(requests), "B/req")
	b.ReportMetric(float64(mem1.Mallocs-mem0.Mallocs)/float64(requests), "allocs/req")
}
