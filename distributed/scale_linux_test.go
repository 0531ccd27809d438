package distributed

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvstrand/mocker/cluster"
)

// FleetWorkersEnv sets how many workers TestScale_KVRoutesAcrossAFleet and
// BenchmarkFleetRouting register: e.g. 256, run as 4 processes of 64. The
// default keeps CI short.
const FleetWorkersEnv = "MOCKER_FLEET_WORKERS"

// fleetPerProcess is how many workers one `mocker worker --count` process
// runs at most.
const fleetPerProcess = 64

// fewWorkers is the same-run baseline's fleet: a handful.
const fewWorkers = 4

func fleetSize(tb testing.TB, def int) int {
	s := os.Getenv(FleetWorkersEnv)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a worker count of at least 1", FleetWorkersEnv, s)
	}
	return n
}

// startFleet runs n aggregated workers in namespace ns as processes of
// at most fleetPerProcess each, and waits until all are registered.
func startFleet(tb testing.TB, ls *localServices, ns string, n int) {
	tb.Helper()
	for i, left := 0, n; left > 0; i++ {
		count := min(left, fleetPerProcess)
		left -= count
		argv := []string{"worker", "--count", strconv.Itoa(count), "--name-prefix", fmt.Sprintf("%s%d", ns, i),
			"--role", "aggregated", "--namespace", ns, "--etcd", ls.etcdURL, "--nats", ls.natsURL,
			"--args", `{"speedup_ratio": 1000}`, "--log-level", "warn", "--drain-timeout", "10s"}
		if err := ls.spawn(os.Getenv(WorkerBinaryEnv), fmt.Sprintf("%s-%d", ns, i), argv); err != nil {
			tb.Fatal(err)
		}
	}
	awaitRegistered(tb, ls, ns, n)
}

// fleetRun is what one closed loop over a fleet measured.
type fleetRun struct {
	requests  int
	routerCPU time.Duration
	workers   map[string]int // requests per worker
	heap      float64        // the router's live heap for the fleet, KB
	// msgsIn and msgsOut are the NATS messages the router took (frames)
	// and sent (commands) over the loop.
	msgsIn, msgsOut uint64
	// events are the messages the workers published on Dynamo's event
	// plane (KV events and load), which mocker's router does not read.
	events uint64
	stats  cluster.Stats // after the drain
}

// routeClosedLoop attaches a kv-mode router to the n workers of ns and
// runs requests through it, inflight at a time, each with a prompt whose
// prefix is one of 32 shared ones, then drains. routerCPU is this
// process's CPU over the loop (the services run in their own process).
func routeClosedLoop(tb testing.TB, ls *localServices, ns string, n, requests, inflight int) fleetRun {
	tb.Helper()
	heap0 := liveHeap()
	c, err := cluster.New(cluster.Config{Name: ns, Workers: n, Router: "kv", Args: map[string]any{"speedup_ratio": 1000},
		Transport: ls.transport(ns)})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	}()
	// Wait for the whole fleet: attaching waits for one worker only.
	deadline := time.Now().Add(2 * time.Minute)
	for len(c.Stats().Workers) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("the router has %d of %d workers after 2 minutes", len(c.Stats().Workers), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	run := fleetRun{requests: requests, workers: map[string]int{}, heap: float64(int64(liveHeap())-int64(heap0)) / 1024}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	nc := c.Transport().(*transport).nc
	var events atomic.Uint64
	sub, err := nc.Subscribe("namespace."+ns+".>", func(*nats.Msg) { events.Add(1) })
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	st0 := nc.Stats()
	ev0 := events.Load()
	cpu0 := selfCPU()
	for range inflight {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(requests) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				r := c.Generate(ctx, cluster.Request{PromptTokens: 512 + int(i%7)*64, MaxTokens: 4,
					Prefix: fmt.Sprintf("tenant-%d", i%32), PrefixTokens: 384})
				cancel()
				mu.Lock()
				if r.Outcome == cluster.OutcomeCompleted {
					run.workers[r.PrefillWorker]++
				} else {
					tb.Errorf("request %d: %s: %s", i, r.Outcome, r.Error)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.routerCPU = selfCPU() - cpu0
	st1 := nc.Stats()
	run.events = events.Load() - ev0
	run.msgsIn, run.msgsOut = st1.InMsgs-st0.InMsgs-run.events, st1.OutMsgs-st0.OutMsgs
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	if run.stats, err = c.Drain(dctx); err != nil {
		tb.Fatal(err)
	}
	return run
}

// checkDrained checks that every request ended with an outcome and that
// no worker holds anything after the drain.
func checkDrained(tb testing.TB, run fleetRun) {
	tb.Helper()
	s := run.stats
	if s.Requests != uint64(run.requests) || s.Completed+s.Aborted+s.Rejected+s.Errored != s.Requests || s.InFlight != 0 {
		tb.Errorf("requests %d: completed %d aborted %d rejected %d errored %d in flight %d", s.Requests,
			s.Completed, s.Aborted, s.Rejected, s.Errored, s.InFlight)
	}
	for _, w := range s.Workers {
		if w.Running+w.Waiting+w.HeldRequests+w.ActiveBlocks+w.HeldBlocks+w.ReservedBlocks != 0 {
			tb.Errorf("worker %s not drained: %+v", w.Name, w)
		}
	}
}

// TestScale_KVRoutesAcrossAFleet registers a fleet (16 workers in 2
// processes by default, MOCKER_FLEET_WORKERS=256 for 4 × 64) against one
// etcd and NATS and has a kv-mode router run a closed loop across it:
// every request completes, the requests spread over the fleet, and the
// pools drain.
func TestScale_KVRoutesAcrossAFleet(t *testing.T) {
	t.Parallel()
	n := fleetSize(t, 16)
	sp, err := startServicesProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sp.close() }()
	ls := sp.localServices
	startFleet(t, ls, "scale", n)
	run := routeClosedLoop(t, ls, "scale", n, 8*n, 16)
	checkDrained(t, run)
	if len(run.stats.Workers) != n {
		t.Errorf("the router had %d workers, want %d", len(run.stats.Workers), n)
	}
	// 32 prefixes over n workers: kv mode spreads them, it does not pile
	// them on a few.
	if want := min(n, 32) / 2; len(run.workers) < want {
		t.Errorf("the requests ran on %d workers, want at least %d: %v", len(run.workers), want, run.workers)
	}
}

// BenchmarkFleetRouting measures a kv-mode router's CPU per request over a
// fleet of MOCKER_FLEET_WORKERS (default 16) and, in the same run, over
// a handful (4) of workers: the etcd and NATS servers run in a process of
// their own, so router-cpu-µs/req is the router alone. Run with a fixed
// count, e.g. -benchtime=2000x.
func BenchmarkFleetRouting(b *testing.B) {
	n := fleetSize(b, 16)
	sp, err := startServicesProcess()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sp.close() }()
	ls := sp.localServices
	startFleet(b, ls, "few", fewWorkers)
	startFleet(b, ls, "many", n)
	for _, bc := range []struct {
		ns string
		n  int
	}{{"few", fewWorkers}, {"many", n}} {
		b.Run(fmt.Sprintf("workers=%d", bc.n), func(b *testing.B) {
			run := routeClosedLoop(b, ls, bc.ns, bc.n, b.N, 16)
			checkDrained(b, run)
			b.ReportMetric(float64(run.routerCPU.Microseconds())/float64(b.N), "router-cpu-µs/req")
			b.ReportMetric(float64(len(run.workers)), "workers-used")
			b.ReportMetric(run.heap/float64(bc.n), "router-heap-KB/worker")
			b.ReportMetric(float64(run.msgsIn)/float64(b.N), "frames/req")
			b.ReportMetric(float64(run.msgsOut)/float64(b.N), "commands/req")
			b.ReportMetric(float64(run.events)/float64(b.N), "event-plane-msgs/req")
		})
	}
}
