package distributed

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvstrand/mocker/cluster"
)

// BenchmarkNATSRequestPath sends requests through a local-mode cluster:
// the router in this process, each worker a child process, every step
// over NATS. Besides ns/op (wall time per request at 8 in flight) it
// reports the CPU each request costs, from the kernel's accounting: in
// this process (router, plus the embedded etcd and NATS server that local
// mode runs here) and in each worker process. Modeled time is made short
// (speedup_ratio 1000, one output token) so the figures are the
// transport's, not the engine's pacing. nats-msgs/req counts what the
// processes published to NATS per request. To see where each process's
// CPU goes, add -cpuprofile FILE (this process) and set
// MOCKER_CPUPROFILE=PREFIX (each worker process, to PREFIX.worker-PID).
func BenchmarkNATSRequestPath(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  cluster.Config
	}{
		{"aggregated", cluster.Config{Workers: 1}},
		{"disagg", cluster.Config{Disagg: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := bc.cfg
			cfg.Name = "bench"
			cfg.Args = map[string]any{"speedup_ratio": 1000}
			cfg.Transport = &cluster.TransportConfig{Local: true}
			c, err := cluster.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			pids := c.Transport().(*transport).local.pids()
			workerCPU := func() map[string]time.Duration {
				out := map[string]time.Duration{}
				for name, pid := range pids {
					out[name], _ = ProcessCPU(pid)
				}
				return out
			}
			// Messages clients published to the embedded NATS server:
			// commands, frames and the event plane.
			natsMsgs := func() int64 {
				v, err := c.Transport().(*transport).local.nats.Varz(nil)
				if err != nil {
					b.Fatal(err)
				}
				return v.InMsgs
			}
			m0 := natsMsgs()
			w0, r0 := workerCPU(), selfCPU()
			b.ResetTimer()
			var next atomic.Int64
			var failed atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						r := c.Generate(context.Background(), cluster.Request{PromptTokens: 128, MaxTokens: 2})
						if r.Outcome != cluster.OutcomeCompleted {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			r1, w1 := selfCPU(), workerCPU()
			m1 := natsMsgs()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d requests did not complete", n, b.N)
			}
			b.ReportMetric(float64((r1-r0).Microseconds())/float64(b.N), "router-cpu-µs/req")
			b.ReportMetric(float64(m1-m0)/float64(b.N), "nats-msgs/req")
			for name, t := range w1 {
				b.ReportMetric(float64((t-w0[name]).Microseconds())/float64(b.N), name+"-cpu-µs/req")
			}
		})
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
