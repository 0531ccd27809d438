package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// loopShapes are the lifecycles a cluster runs: aggregated, source-first
// (vLLM, SGLang with optimistic prefill) and destination-first (SGLang),
// each sized to saturate its decode so that holds wait, abort and refuse.
var loopShapes = []struct {
	name string
	cfg  func(seed uint64) Config
}{
	{"vllm-disagg", func(seed uint64) Config { return saturatedShape("vllm", seed, nil) }},
	{"sglang-destination-first", func(seed uint64) Config { return saturatedShape("sglang", seed, nil) }},
	{"sglang-optimistic", func(seed uint64) Config {
		return saturatedShape("sglang", seed, map[string]any{"sglang": map[string]any{"optimistic_prefill": true}})
	}},
	{"sglang-instant-transfer", func(seed uint64) Config {
		// No modeled transfer time: a decode connects and its room
		// closes at one instant.
		cfg := saturatedShape("sglang", seed, nil)
		delete(cfg.Args, "kv_bytes_per_token")
		delete(cfg.Args, "kv_transfer_bandwidth")
		return cfg
	}},
	{"vllm-aggregated", func(seed uint64) Config {
		return Config{Engine: "vllm", Workers: 2, Router: "kv", Seed: seed,
			Args: map[string]any{"num_gpu_blocks": 256, "max_num_seqs": 4}}
	}},
	{"vllm-disagg-dp", func(seed uint64) Config {
		// Two data-parallel ranks on each side, the decode's each with
		// one sequence slot: still saturated, rank by rank.
		cfg := saturatedShape("vllm", seed, nil)
		cfg.Prefill.Args["dp_size"] = 2
		cfg.Decode.Args["dp_size"] = 2
		cfg.Decode.Args["max_num_seqs"] = 1
		return cfg
	}},
}

// saturatedShape is a disaggregated cluster whose one decode worker has two
// sequence slots: holds wait for decode, some abort, the busy threshold
// refuses prefills.
func saturatedShape(engine string, seed uint64, extra map[string]any) Config {
	args := map[string]any{"kv_transfer_abort_timeout_ms": 60, "kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25}
	for k, v := range extra {
		args[k] = v
	}
	return Config{Engine: engine, Disagg: true, Router: "kv", Seed: seed, Args: args,
		Prefill:       PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 160}},
		Decode:        PoolConfig{Workers: 1, Args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 2}},
		RouterOptions: map[string]any{"busy_threshold": 0.9},
	}
}

// burst is n arrivals spread over spanMs modeled ms, drawn from seed:
// prompts of 64 to 512 tokens sharing one of four prefixes, up to 24
// output tokens.
func burst(seed uint64, n int, spanMs float64) []Arrival { return burstUpTo(seed, n, spanMs, 24) }

// burstUpTo is burst with at most maxTokens output tokens a request.
func burstUpTo(seed uint64, n int, spanMs float64, maxTokens int) []Arrival {
	out := make([]Arrival, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	next := func(k uint64) uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x % k }
	for i := range out {
		prompt := 64 + int(next(449))
		out[i] = Arrival{AtMs: float64(next(uint64(spanMs*1000))) / 1000, Request: Request{
			PromptTokens: prompt, MaxTokens: 1 + int(next(uint64(maxTokens))),
			Prefix: fmt.Sprintf("p%d", next(4)), PrefixTokens: prompt / 2,
		}}
	}
	return out
}

func runJSON(t require.TestingT, run VirtualRun) string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	// Stats and Series too: they are taken at the last result's instant,
	// never where the loop's leftover timers happened to be. The transfer
	// servers' ports are the host's.
	run.Stats.Workers = slices.Clone(run.Stats.Workers)
	for i := range run.Stats.Workers {
		run.Stats.Workers[i].TransferAddr = ""
	}
	b, err := json.Marshal(struct {
		Results []Result
		Events  []Event
		Stats   Stats
		Series  Series
	}{run.Results, run.Events, run.Stats, run.Series})
	require.NoError(t, err)
	return string(b)
}

// TestVirtual_DeterministicCluster: the same config, seed and arrivals give
// a byte-identical event log and results, for every lifecycle, and the log
// depends on the seed.
func TestVirtual_DeterministicCluster(t *testing.T) {
	for _, shape := range loopShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			arr := burst(7, 120, 400)
			a, err := RunVirtual(shape.cfg(1), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			b, err := RunVirtual(shape.cfg(1), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			assert.Equal(t, runJSON(t, a), runJSON(t, b), "same config, seed and arrivals: byte-identical")
			c, err := RunVirtual(shape.cfg(2), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			assert.NotEqual(t, runJSON(t, a), runJSON(t, c), "the run depends on the seed")

			s := a.Stats
			assert.Equal(t, uint64(len(arr)), s.Requests)
			assert.Equal(t, s.Requests, s.Completed+s.Aborted+s.Rejected+s.Errored)
			assert.Zero(t, s.Errored, "no request errs")
			assert.Zero(t, s.HeldBlocks+s.ReservedBlocks+s.ActiveBlocks, "nothing left behind")
			if shape.name == "vllm-disagg" {
				assert.Positive(t, s.HoldsAborted, "the saturated decode makes holds abort")
				assert.Positive(t, s.HoldsReleased)
			}
		})
	}
}

// TestVirtual_SocketsChangeNothing: the transfer-room steps over real
// sockets give exactly the results and log of the in-memory link: the loop
// holds modeled time at each pending reply, so socket latency never becomes
// modeled time.
func TestVirtual_SocketsChangeNothing(t *testing.T) {
	for _, shape := range loopShapes[:3] {
		t.Run(shape.name, func(t *testing.T) {
			arr := burst(11, 80, 300)
			mem, err := RunVirtual(shape.cfg(3), arr, VirtualOptions{EventLog: true})
			require.NoError(t, err)
			tcp, err := RunVirtual(shape.cfg(3), arr, VirtualOptions{TCP: true, EventLog: true})
			require.NoError(t, err)
			assert.Equal(t, runJSON(t, mem), runJSON(t, tcp))
		})
	}
	// With no modeled transfer time the decode connects and the room
	// closes at one instant: the decode must still reach the server
	// first, as it does in memory, however fast the close is.
	for _, eng := range []string{"vllm", "sglang"} {
		t.Run(eng+"-instant-transfer", func(t *testing.T) {
			for seed := range uint64(8) {
				cfg := saturatedShape(eng, seed, nil)
				delete(cfg.Args, "kv_bytes_per_token")
				delete(cfg.Args, "kv_transfer_bandwidth")
				arr := burst(seed, 200, 300)
				mem, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
				require.NoError(t, err)
				require.Positive(t, mem.Stats.TransfersCompleted)
				for _, r := range mem.Results {
					require.Zero(t, r.TransferMs, "transfers take no modeled time")
				}
				tcp, err := RunVirtual(cfg, arr, VirtualOptions{TCP: true, EventLog: true})
				require.NoError(t, err)
				require.Equal(t, runJSON(t, mem), runJSON(t, tcp), "seed %d", seed)
			}
		})
	}
}

// TestVirtual_ReusedRecordsChangeNothing: the loop reuses the records of
// ended requests, their calls and their transfer exchanges for later ones;
// a run that gives each its own gives exactly the same results, log,
// stats and series, so nothing that outlives a request (a link reply, a
// queued callback) reaches the request that took over its record.
func TestVirtual_ReusedRecordsChangeNothing(t *testing.T) {
	reusedMatchesFresh := func(t *testing.T, cfg Config, arr []Arrival) VirtualRun {
		t.Helper()
		reused, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
		require.NoError(t, err)
		fresh, err := runArrivals(cfg, arr, options{virtual: true, memory: true, keepEvents: true, shareTokens: true, fresh: true})
		require.NoError(t, err)
		assert.Equal(t, runJSON(t, fresh), runJSON(t, reused))
		return reused
	}
	for _, shape := range loopShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			reusedMatchesFresh(t, shape.cfg(5), burst(13, 150, 250))
		})
	}
	t.Run("saturated-decode", func(t *testing.T) {
		// BenchmarkVirtualDisagg's shape: holds queue for the decode and
		// about half of them abort.
		t.Parallel()
		reused := reusedMatchesFresh(t, saturatedDisagg(), burstUpTo(17, 1500, 4000, 100))
		require.Positive(t, reused.Stats.HoldsAborted)
	})
}

// TestStepped_ReusedRecordsChangeNothingUnderStops is
// TestVirtual_ReusedRecordsChangeNothing with callers that give up: a third
// of the requests are stopped at scripted instants (queued, held,
// connected or decoding), so requests end by every path while later
// arrivals take their records. A run that reuses nothing gives the same
// results and stats.
func TestStepped_ReusedRecordsChangeNothingUnderStops(t *testing.T) {
	for _, shape := range loopShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			run := func(fresh bool) string {
				c, err := newClusterOf(shape.cfg(9), options{virtual: true, stepped: true, memory: true, fresh: fresh})
				require.NoError(t, err)
				const n = 240
				results := make([]Result, n)
				cancels := make([]context.CancelFunc, n)
				stopAt := make([]float64, n)
				for i := range n {
					now := float64(i) * 2
					ctx, cancel := context.WithCancel(context.Background())
					cancels[i] = cancel
					if i%3 == 0 {
						stopAt[i] = now + float64(1+i%11)*7
					}
					c.Submit(ctx, Request{PromptTokens: 64 + (i*37)%400, MaxTokens: 1 + i%24}, Key{Seq: uint64(i)},
						func(r Result) { results[i] = r })
					for j := range i {
						if stopAt[j] > 0 && stopAt[j] <= now {
							cancels[j]()
						}
					}
					c.Settle(now)
				}
				for _, cancel := range cancels {
					cancel()
				}
				for {
					at, ok := c.Next()
					if !ok {
						break
					}
					c.Settle(at)
				}
				s, err := json.Marshal(struct {
					Results []Result
					Stats   Stats
				}{results, c.statsNow()})
				require.NoError(t, err)
				require.NoError(t, c.Close())
				stopped := 0
				for _, r := range results {
					require.NotEmpty(t, r.Outcome, "every request ends")
					if r.Error == "context canceled" {
						stopped++
					}
				}
				assert.Positive(t, stopped)
				return string(s)
			}
			assert.Equal(t, run(true), run(false))
		})
	}
}

// burnCPU keeps n goroutines spinning until the returned stop is called:
// a busy host beside the cluster.
func burnCPU(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 10000 {
					x += i
				}
				runtime.Gosched()
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// TestPaced_ResultsAreTheVirtualOnes: random arrival traces through the
// wall-paced loop (real sockets, speedup 1, 10 or 200, two goroutines
// burning CPU beside it) give exactly the results and event log of the
// virtual run. Host speed decides only how late the loop runs, never what
// it computes.
func TestPaced_ResultsAreTheVirtualOnes(t *testing.T) {
	stop := burnCPU(2)
	defer stop()
	rapid.Check(t, func(rt *rapid.T) {
		shape := rapid.SampledFrom(loopShapes).Draw(rt, "shape")
		speedup := rapid.SampledFrom([]float64{1, 10, 200}).Draw(rt, "speedup")
		n := rapid.IntRange(1, 16).Draw(rt, "requests")
		// About 20 ms of wall time of arrivals, whatever the speedup, and
		// short generations, so that a trace at speedup 1 stays short too.
		arr := burstUpTo(rapid.Uint64().Draw(rt, "trace"), n, 20*speedup, 6)
		cfg := shape.cfg(5)
		cfg.Args["speedup_ratio"] = speedup
		virt, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
		require.NoError(rt, err)
		paced, err := runArrivals(cfg, arr, options{keepEvents: true, shareTokens: true})
		require.NoError(rt, err)
		if a, b := runJSON(t, virt), runJSON(t, paced); a != b {
			rt.Fatalf("paced run differs from the virtual one at speedup %g:\nvirtual %s\npaced   %s", speedup, a, b)
		}
	})
}

// TestPaced_ArrivalsTakeTheLoopsNow: a request from a script arrives at
// the loop's modeled now, which follows the wall clock while the loop is
// idle and never goes back.
func TestPaced_ArrivalsTakeTheLoopsNow(t *testing.T) {
	c := start(t, Config{Workers: 1, Args: map[string]any{"speedup_ratio": 1000}})
	var last float64
	for range 5 {
		before := c.Now()
		require.NoError(t, c.Sleep(context.Background(), 50))
		res := c.Generate(context.Background(), Request{PromptTokens: 32, MaxTokens: 2})
		require.Equal(t, OutcomeCompleted, res.Outcome, res.Error)
		now := c.Now()
		assert.GreaterOrEqual(t, now, before+50, "a modeled sleep moves the loop's clock by at least its length")
		assert.GreaterOrEqual(t, now, last)
		last = now
	}
}

// TestSeries_RecordsTheCascadeBounded: the cluster's own history shows the
// held blocks and the aborts of a saturated run, its peak held figure is
// the run's peak, and it stays within its point bound however long the run.
func TestSeries_RecordsTheCascadeBounded(t *testing.T) {
	arr := burst(3, 400, 60000)
	run, err := RunVirtual(saturatedShape("vllm", 1, nil), arr, VirtualOptions{EventLog: true})
	require.NoError(t, err)
	s := run.Series
	require.NotEmpty(t, s.Points)
	assert.LessOrEqual(t, len(s.Points), maxSeriesPoints)
	assert.Greater(t, s.IntervalMs, seriesStartMs, "a minute of modeled time merged buckets")
	peak, aborts, ended := 0, uint64(0), uint64(0)
	for _, p := range s.Points {
		peak = max(peak, p.HeldBlocks)
		aborts += p.HoldAborts
		ended += p.Completed + p.Aborted + p.Rejected + p.Errored
	}
	assert.Equal(t, run.Stats.HoldsAborted, aborts, "every hold abort is in the series")
	assert.Equal(t, uint64(len(arr)), ended, "every request's end is in the series")
	assert.Equal(t, run.Stats.PeakHeldBlocks, peak, "the series' peak is the run's")
	assert.Positive(t, peak)
}

// TestVirtual_RouterTTLsRunOnModeledTime: the router's TTLs run on the
// cluster's modeled clock. A request still decoding 3 modeled seconds after
// it was routed has outlived router_request_ttl_secs 1 and is dropped from
// the router's load tracking when the next request is routed, although the
// whole virtual run takes milliseconds of wall time; and two runs agree
// byte for byte.
func TestVirtual_RouterTTLsRunOnModeledTime(t *testing.T) {
	cfg := Config{Engine: "vllm", Workers: 2, Router: "kv", Seed: 3,
		RouterOptions: map[string]any{"router_request_ttl_secs": 1}}
	arr := []Arrival{
		{AtMs: 0, Request: Request{PromptTokens: 64, MaxTokens: 2000}},
		{AtMs: 3000, Request: Request{PromptTokens: 64, MaxTokens: 2}},
	}
	c, err := newClusterOf(cfg, options{virtual: true, memory: true, batch: true})
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	results := &batchResults{results: make([]Result, len(arr)), left: len(arr), done: make(chan struct{})}
	c.send(arrivalsMsg{arrivals: arr, order: []int32{0, 1}, results: results})
	<-results.done
	var expired uint64
	c.query(func() { expired = c.router.Stats().ExpiredRequests })
	assert.Equal(t, uint64(1), expired, "the first request outlived its TTL in modeled time")

	a, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
	require.NoError(t, err)
	b, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
	require.NoError(t, err)
	assert.Equal(t, runJSON(t, a), runJSON(t, b))
}
