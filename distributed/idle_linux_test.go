package distributed

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// idleOp is the wall time one iteration of BenchmarkIdleWorkers idles.
const idleOp = 250 * time.Millisecond

// BenchmarkIdleWorkers measures what registered, idle workers cost: N
// aggregated workers run as one `mocker worker --count N` process against
// an embedded etcd and NATS in this process, and each iteration is
// idleOp of wall time with nothing to do. It reports
//   - worker-cpu-µs/s: the worker process's CPU per wall second, per
//     worker (fleet-cpu-µs/s: the whole process's);
//   - services-cpu-µs/s: this process's (etcd and NATS serving the
//     workers' keep-alives and heads) with no router attached;
//   - router-cpu-µs/s: what attaching a router to the N workers adds to
//     this process, measured over the same number of iterations right
//     after: the router's own idle cost;
//   - heap-KB/worker: live heap per worker when the N workers run in this
//     process instead (worker.RunFleet), the etcd and NATS servers' state
//     for them included; rss-KB/worker: the worker process's resident
//     memory over N.
//
// N=0 is the same-run baseline: the services with no worker; with
// MOCKER_FLEET_WORKERS set past 64 that many run too, as processes of at
// most 64 (fleet-cpu-µs/s and rss-KB/worker then sum them). Run with a
// fixed count, e.g. -benchtime=40x (10 s windows): CPU figures under a
// few hundred µs/s need long windows.
func BenchmarkIdleWorkers(b *testing.B) {
	sizes := []int{0, 1, 16, 64}
	if n := fleetSize(b, 0); n > 64 {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) { benchIdle(b, n) })
	}
}

func benchIdle(b *testing.B, n int) {
	sp, err := startServicesProcess()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sp.close() }()
	ls := sp.localServices
	ns := fmt.Sprintf("idle%d", n)
	if n > 0 {
		startFleet(b, ls, ns, n)
	}
	var pids []int
	ls.mu.Lock()
	for _, ch := range ls.children {
		pids = append(pids, ch.cmd.Process.Pid)
	}
	ls.mu.Unlock()
	fleetCPU := func() (total time.Duration) {
		for _, pid := range pids {
			total += tasksCPU(pid)
		}
		return total
	}
	// Let registration's work settle before measuring.
	time.Sleep(time.Second)
	b.ResetTimer()
	s0, w0, t0 := tasksCPU(sp.cmd.Process.Pid), fleetCPU(), selfCPU()
	idle(b.N)
	s1, w1, t1 := tasksCPU(sp.cmd.Process.Pid), fleetCPU(), selfCPU()
	b.StopTimer()
	secs := (time.Duration(b.N) * idleOp).Seconds()
	perSec := func(d time.Duration) float64 { return float64(d.Microseconds()) / secs }
	b.ReportMetric(perSec(s1-s0), "services-cpu-µs/s")
	b.ReportMetric(perSec(t1-t0), "norouter-cpu-µs/s")
	if n == 0 {
		return
	}
	b.ReportMetric(perSec(w1-w0), "fleet-cpu-µs/s")
	b.ReportMetric(perSec(w1-w0)/float64(n), "worker-cpu-µs/s")
	var rss int64
	for _, pid := range pids {
		rss += vmRSSKB(pid)
	}
	b.ReportMetric(float64(rss)/float64(n), "rss-KB/worker")

	c, err := cluster.New(cluster.Config{Name: ns, Workers: n, Args: map[string]any{"speedup_ratio": 1000}, Transport: ls.transport(ns)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	time.Sleep(time.Second)
	r0, rs0 := selfCPU(), tasksCPU(sp.cmd.Process.Pid)
	idle(b.N)
	r1, rs1 := selfCPU(), tasksCPU(sp.cmd.Process.Pid)
	b.ReportMetric(perSec(r1-r0), "router-cpu-µs/s")
	b.ReportMetric(perSec(rs1-rs0), "services-with-router-cpu-µs/s")
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(inProcessHeapKB(b, ls, n)/float64(n), "heap-KB/worker")
}

func idle(iters int) {
	for range iters {
		time.Sleep(idleOp)
	}
}

func awaitRegistered(b testing.TB, ls *localServices, ns string, n int) {
	b.Helper()
	ec, err := plane.DialEtcd(context.Background(), []string{ls.etcdURL}, ls.etcdAuth)
	if err != nil {
		b.Fatal(err)
	}
	defer ec.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == int64(n) {
			return
		}
		if err := ls.exited(); err != nil {
			b.Fatal(err)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d workers not registered after 2 minutes", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inProcessHeapKB runs n idle workers in this process and returns the live
// heap they add, in KB, once registered and idle for a second.
func inProcessHeapKB(b *testing.B, ls *localServices, n int) float64 {
	b.Helper()
	ns := fmt.Sprintf("heap%d", n)
	before := liveHeap()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := worker.Config{Role: engine.WorkerAggregated, Namespace: ns, Etcd: []string{ls.etcdURL}, NATS: ls.natsURL,
		NATSAuth: ls.natsAuth, EtcdAuth: ls.etcdAuth, DrainTimeout: 5 * time.Second}
	go func() { done <- worker.RunFleet(ctx, worker.Fleet{Config: cfg, Count: n, NamePrefix: "h"}) }()
	awaitRegistered(b, ls, ns, n)
	time.Sleep(time.Second)
	after := liveHeap()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(int64(after)-int64(before)) / 1024
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// tasksCPU is the CPU time process pid's threads have used, summed from
// /proc/PID/task/*/schedstat (nanoseconds, finer than /proc/PID/stat's
// clock ticks); 0 for pid 0.
func tasksCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			total += time.Duration(ns)
		}
	}
	return total
}

// vmRSSKB is process pid's resident set, in KB.
func vmRSSKB(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
