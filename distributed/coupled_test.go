package distributed

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/perf"
)

// coupledArgs are the coupled tests' worker args: a pool small enough that
// the requests below queue, preempt and hit each other's prefixes.
const coupledArgs = `{"speedup_ratio": 1, "num_gpu_blocks": 48, "max_num_seqs": 6}`

// coupledLoad is the tests' requests: arrival instants (modeled ms) and
// prompts, a third of them sharing a 64-token prefix.
func coupledLoad() (at []float64, reqs []engine.Request) {
	rng := rand.New(rand.NewPCG(7, 7))
	shared := make([]uint32, 64)
	for i := range shared {
		shared[i] = rng.Uint32N(30000)
	}
	t := 500.0
	for i := range 24 {
		var toks []uint32
		if i%3 == 0 {
			toks = append(toks, shared...)
		}
		for range 48 + rng.IntN(200) {
			toks = append(toks, rng.Uint32N(30000))
		}
		reqs = append(reqs, engine.Request{ID: uint64(i + 1), Tokens: toks, MaxTokens: 4 + rng.IntN(40)})
		at = append(at, t)
		t += float64(rng.IntN(40))
	}
	return at, reqs
}

// completion is what the tests compare of a finished request.
type completion struct {
	ID                     uint64
	Arrival, At, FirstAt   float64
	Prompt, Cached         int
	Preemptions, Generated int
	Truncated              bool
}

func completionsOf(cs []engine.Completion) []completion {
	out := make([]completion, 0, len(cs))
	for _, c := range cs {
		out = append(out, completion{ID: c.RequestID, Arrival: c.Arrival, At: c.At, FirstAt: c.FirstTokenAt, Prompt: c.PromptTokens,
			Cached: c.CachedTokens, Preemptions: c.Preemptions, Generated: c.OutputTokens, Truncated: c.Truncated})
	}
	return out
}

// coupledDriver is a router's side of one coupled session, by hand: it
// hands in the load at its instants and runs the worker from one of its
// events to the next, waiting for each turn's answer before time moves on.
type coupledDriver struct {
	t       *testing.T
	nc      *nats.Conn
	reg     plane.Registration
	frames  chan *plane.Frame
	session uint64
	seq     uint64
	turn    uint64
	jitter  func() // runs before each command: the wall time it takes must not matter
	router  *testRouter
}

// testRouter is a router's identity, by hand: its key in etcd, under its
// lease, and its sessions' MAC keys.
type testRouter struct {
	id    int64
	ns    string
	plane plane.KeyPair
	mu    sync.Mutex
	keys  map[uint64][]byte // by session
}

// newTestRouter registers a router in ns; the workers started after it
// know its key from the start.
func newTestRouter(t *testing.T, ls *localServices, ns string) *testRouter {
	t.Helper()
	ec := etcdClient(t, ls)
	lease, err := ec.Grant(context.Background(), 600)
	require.NoError(t, err)
	key, err := plane.NewKeyPair()
	require.NoError(t, err)
	rec, err := json.Marshal(plane.RouterRegistration{RouterID: int64(lease.ID), PlaneKey: key.Public()})
	require.NoError(t, err)
	_, err = ec.Put(context.Background(), plane.RouterKey(ns, int64(lease.ID)), string(rec), clientv3.WithLease(lease.ID))
	require.NoError(t, err)
	return &testRouter{id: int64(lease.ID), ns: ns, plane: key, keys: map[uint64][]byte{}}
}

// key is session's MAC key with worker reg.
func (r *testRouter) key(t *testing.T, reg plane.Registration, session uint64) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[session]; k != nil {
		return k
	}
	k, err := r.plane.SessionKey(reg.PlaneKey, r.ns, reg.InstanceID, r.id, session)
	require.NoError(t, err)
	r.keys[session] = k
	return k
}

// open returns a frame's body when one of the router's sessions' tags
// verifies.
func (r *testRouter) open(subject string, data []byte) ([]byte, bool) {
	tags, body, err := plane.Unseal(data)
	if err != nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tag := range tags {
		if k := r.keys[tag.ID]; k != nil && plane.Verify(tag, k, plane.DirFrame, subject, body) {
			return body, true
		}
	}
	return nil, false
}

func newCoupledDriver(t *testing.T, ls *localServices, ns string, router *testRouter) *coupledDriver {
	t.Helper()
	ec := etcdClient(t, ls)
	resp, err := ec.Get(context.Background(), plane.RegistrationPrefix(ns), clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	var reg plane.Registration
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &reg))
	return driverFor(t, ls, reg, router)
}

// driverFor is a coupledDriver of worker reg's that has not said hello
// yet; its frames are the ones that verify under router's sessions.
func driverFor(t *testing.T, ls *localServices, reg plane.Registration, router *testRouter) *coupledDriver {
	t.Helper()
	nc, err := plane.DialNATS(ls.natsURL, "coupled-test", ls.natsAuth)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	d := &coupledDriver{t: t, nc: nc, reg: reg, frames: make(chan *plane.Frame, 1024), router: router}
	sub, err := nc.Subscribe(reg.OutSubject, func(m *nats.Msg) {
		body, ok := router.open(m.Subject, m.Data)
		f := new(plane.Frame)
		if ok && plane.DecodeFrame(body, f) == nil {
			d.frames <- f
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return d
}

func (d *coupledDriver) send(c plane.Command) {
	if d.jitter != nil {
		d.jitter()
	}
	d.seq++
	c.Session, c.Seq = d.session, d.seq
	if c.Op == plane.OpHello {
		c.Router = d.router.id
	}
	data, err := plane.EncodeCommand(&c)
	require.NoError(d.t, err)
	key := d.router.key(d.t, d.reg, d.session)
	require.NoError(d.t, d.nc.Publish(d.reg.CmdSubject, plane.Seal(plane.DirCommand, d.reg.CmdSubject, data, plane.Keyed{ID: d.session, Key: key})))
}

// answer waits for the frame that answers turn, collecting the outputs'
// completions of the frames up to it; it returns the worker's next event.
func (d *coupledDriver) answer(turn uint64, into *[]engine.Completion) (next float64, ok bool) {
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f := <-d.frames:
			if f.Refused != nil {
				d.t.Fatalf("session refused: %s", f.Refused.Reason)
			}
			for _, it := range f.Items {
				if it.Output != nil {
					*into = append(*into, it.Output.Completions...)
				}
				if it.Input != nil && it.Input.Err != "" {
					d.t.Fatalf("input refused: %s", it.Input.Err)
				}
			}
			if f.Turn >= turn && f.Seq > 0 {
				if f.Next == nil {
					return 0, false
				}
				return *f.Next, true
			}
		case <-timeout:
			d.t.Fatalf("no answer to turn %d", turn)
		}
	}
}

// run drives one coupled session through the load and returns what
// completed, in the order it completed.
func (d *coupledDriver) run(session uint64) []engine.Completion {
	d.session, d.seq, d.turn = session, 0, 1
	at, reqs := coupledLoad()
	var done []engine.Completion
	d.send(plane.Command{Op: plane.OpHello, Coupled: true, At: at[0], Turn: d.turn})
	next, pending := d.answer(d.turn, &done)
	i := 0
	for i < len(reqs) || pending {
		d.turn++
		if i < len(reqs) && (!pending || at[i] <= next) {
			r := reqs[i]
			d.send(plane.Command{Op: plane.OpSubmit, At: at[i], Turn: d.turn, ID: r.ID, Tokens: r.Tokens, MaxTokens: r.MaxTokens})
			i++
		} else {
			d.send(plane.Command{Op: plane.OpRun, Until: next, Turn: d.turn})
		}
		next, pending = d.answer(d.turn, &done)
	}
	d.send(plane.Command{Op: plane.OpBye})
	return done
}

// inProcess runs the same load on an engine in this process.
func inProcess(t *testing.T) []engine.Completion {
	t.Helper()
	args, err := worker.ResolveArgs(worker.Config{Role: engine.WorkerAggregated, Engine: "vllm", Args: []byte(coupledArgs)})
	require.NoError(t, err)
	model, err := perf.FromProfile(args.PlannerProfileData)
	require.NoError(t, err)
	ew, err := engine.New(args, model, 0)
	require.NoError(t, err)
	v := engine.NewVirtual(ew)
	var done []engine.Completion
	v.OnOutput = func(_ int, out *engine.Output) { done = append(done, out.Completions...) }
	at, reqs := coupledLoad()
	v.AdvanceTo(at[0])
	for i, r := range reqs {
		require.NoError(t, v.RunUntil(at[i]))
		v.AdvanceTo(at[i])
		v.Schedule(at[i], 0, &engine.Submit{Request: r, Policy: engine.Release})
	}
	require.NoError(t, v.Run())
	return done
}

// TestCoupled_ResultsDependOnTheCommandsAlone: a worker on a router's
// clock gives the same completions, to the microsecond, whether its
// commands come at once or after random wall delays, and the same as the
// engine run in this process on the same load: the wall time between
// commands never becomes modeled time.
func TestCoupled_ResultsDependOnTheCommandsAlone(t *testing.T) {
	ls := services(t)
	const ns = "coupled"
	router := newTestRouter(t, ls, ns)
	startWorkers(t, ls, ns, worker.Config{Name: "worker-0", Role: engine.WorkerAggregated, Args: []byte(coupledArgs)})
	d := newCoupledDriver(t, ls, ns, router)

	fast := completionsOf(d.run(11))
	rng := rand.New(rand.NewPCG(1, 2))
	d.jitter = func() { time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) }
	slow := completionsOf(d.run(12))
	want := completionsOf(inProcess(t))

	require.Len(t, want, 24, "every request completes in process")
	assert.Equal(t, want, fast, "coupled, commands at once: the in-process results")
	assert.Equal(t, want, slow, "coupled, commands after wall delays: the same results")
	hits, preempted := 0, 0
	for _, c := range want {
		if c.Cached > 0 {
			hits++
		}
		preempted += c.Preemptions
	}
	assert.Positive(t, hits, "the load hits the prefix cache")
	t.Logf("24 requests: %d found a prefix cached, %d preemptions", hits, preempted)
}

// TestCoupled_SecondRouterIsRefused: while one router drives a worker's
// clock, another's coupled hello is refused, saying why, and its
// requests are refused by name; the first session goes on.
func TestCoupled_SecondRouterIsRefused(t *testing.T) {
	ls := services(t)
	const ns = "coupled-two"
	router := newTestRouter(t, ls, ns)
	startWorkers(t, ls, ns, worker.Config{Name: "worker-0", Role: engine.WorkerAggregated, Args: []byte(coupledArgs)})
	d := newCoupledDriver(t, ls, ns, router)
	d.session, d.turn = 21, 1
	var done []engine.Completion
	d.send(plane.Command{Op: plane.OpHello, Coupled: true, At: 100, Turn: 1})
	_, pending := d.answer(1, &done)
	assert.False(t, pending, "a fresh engine has nothing to do")

	other := &coupledDriver{t: t, nc: d.nc, reg: d.reg, frames: d.frames, session: 22, router: router}
	other.send(plane.Command{Op: plane.OpHello, Coupled: true, At: 0, Turn: 1})
	var refused *plane.SessionEnded
	deadline := time.After(10 * time.Second)
	for refused == nil {
		select {
		case f := <-d.frames:
			refused = f.Refused
		case <-deadline:
			t.Fatal("the second coupled hello was not answered")
		}
	}
	assert.Equal(t, uint64(22), refused.Session)
	assert.Contains(t, refused.Reason, "worker worker-0 cannot run on a router's clock: it already runs on another router's clock")

	// The first session still drives the worker.
	d.turn = 2
	d.send(plane.Command{Op: plane.OpSubmit, At: 100, Turn: 2, ID: 1, Tokens: make([]uint32, 40), MaxTokens: 3})
	next, pending := d.answer(2, &done)
	for turn := uint64(3); pending; turn++ {
		d.send(plane.Command{Op: plane.OpRun, Until: next, Turn: turn})
		next, pending = d.answer(turn, &done)
	}
	require.Len(t, done, 1)
	assert.Greater(t, done[0].At, 100.0)
}

// coupledArrivals is a virtual run's load: a request every gapMs, a
// quarter of them sharing a 512-token prefix.
func coupledArrivals(n int, gapMs float64) []cluster.Arrival {
	out := make([]cluster.Arrival, n)
	for i := range out {
		req := cluster.Request{PromptTokens: 1024, MaxTokens: 32}
		if i%4 == 0 {
			req.Prefix, req.PrefixTokens = "shared", 512
		}
		out[i] = cluster.Arrival{AtMs: float64(i) * gapMs, Request: req}
	}
	return out
}

// burnCPU runs two busy processes beside the test until it ends: the
// host is then slower, which a coupled run must not notice.
func burnCPU(t *testing.T) {
	t.Helper()
	for range 2 {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// TestCoupled_VirtualRunOnWorkerProcesses: RunVirtual over worker
// processes (local mode: an embedded etcd and NATS) whose clocks the
// cluster drives. A saturated disaggregated run (holds abort at the
// timeout, prefills are refused) gives exactly the in-process cluster's
// results, and again with CPU burners beside it: the wall time messages
// take between processes is no modeled time.
func TestCoupled_VirtualRunOnWorkerProcesses(t *testing.T) {
	for _, eng := range []string{"vllm", "sglang"} {
		t.Run(eng, func(t *testing.T) {
			cfg := saturatedConfig(eng)
			arrivals := coupledArrivals(60, 60)
			cfg.Transport = nil
			want, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{EventLog: true})
			require.NoError(t, err)
			cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
			start := time.Now()
			first, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{EventLog: true})
			require.NoError(t, err)
			took := time.Since(start)
			burnCPU(t)
			start = time.Now()
			second, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{})
			require.NoError(t, err)
			t.Logf("%s: %s of wall time idle, %s with the host busy, for %.0f modeled ms", eng,
				took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), first.Stats.NowMs)

			counts := map[string]int{}
			for _, r := range first.Results {
				counts[r.Outcome]++
				if r.Outcome == cluster.OutcomeError {
					t.Errorf("request errored: %s", r.Error)
				}
			}
			t.Logf("%s: %v; %d holds aborted", eng, counts, first.Stats.HoldsAborted)
			assert.Equal(t, want.Results, first.Results, "the in-process cluster's results, ids and all")
			assert.Equal(t, want.Events, first.Events, "and its forensic log")
			assert.Equal(t, want.Results, second.Results, "the same results with the host busy")
			assert.Equal(t, want.Stats.NowMs, first.Stats.NowMs)
			assert.Equal(t, want.Stats.NowMs, second.Stats.NowMs)
			if eng == "vllm" {
				assert.Positive(t, first.Stats.HoldsAborted, "decode saturates and holds abort")
				assert.Positive(t, counts[cluster.OutcomeRejected], "prefills are refused")
			}
		})
	}
}

type chanGate chan struct{}

func (g chanGate) Wait(context.Context) bool { <-g; return true }
func (g chanGate) Open()                     { close(g) }

// closedLoop drives a stepped cluster as `mocker run` does on its virtual
// clock: vus users, each sending its next request at the instant its last
// one ended, until endMs; it returns each user's results in order.
func closedLoop(t *testing.T, cfg cluster.Config, vus int, endMs float64) []cluster.Result {
	t.Helper()
	c, err := cluster.NewStepped(cfg, func() cluster.Gate { return make(chanGate) })
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	type key struct{ vu, seq int }
	got := map[key]cluster.Result{}
	seq := make([]int, vus)
	var ready []int
	submit := func(vu int) {
		seq[vu]++
		k := key{vu, seq[vu]}
		req := cluster.Request{PromptTokens: 512, MaxTokens: 24, Prefix: fmt.Sprintf("conversation-%d", (vu*7+seq[vu]*3)%32), PrefixTokens: 384}
		c.Submit(context.Background(), req, cluster.Key{Source: uint64(vu), Seq: uint64(seq[vu])}, func(r cluster.Result) {
			got[k] = r
			ready = append(ready, vu)
		})
	}
	for vu := range vus {
		submit(vu)
	}
	now := 0.0
	c.Settle(now)
	for {
		for len(ready) > 0 {
			users := ready
			ready = nil
			if now < endMs {
				for _, vu := range users {
					submit(vu)
				}
			}
			c.Settle(now)
		}
		at, ok := c.Next()
		if !ok {
			break
		}
		now = at
		c.Settle(now)
	}
	var out []cluster.Result
	for vu := range vus {
		for s := 1; s <= seq[vu]; s++ {
			out = append(out, got[key{vu, s}])
		}
	}
	return out
}

// cellConfig is the e2e matrix's vLLM disaggregated cell, in process.
func cellConfig(router string) cluster.Config {
	return cluster.Config{Name: "cell", Engine: "vllm", Disagg: true, Router: router, Seed: 7,
		Prefill: cluster.PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 640}},
		Decode:  cluster.PoolConfig{Workers: 2, Args: map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 4}},
		Args:    map[string]any{"block_size": 16, "speedup_ratio": 10, "kv_transfer_abort_timeout_ms": 400}}
}

// TestCoupled_LoadAwareRoutersGiveTheInProcessResults: RunVirtual over
// coupled worker processes under the kv and least-loaded routers, whose
// choices follow what the workers report at each instant: 400 requests
// that saturate decode (holds abort), 32 conversations sharing prefixes,
// give exactly the in-process cluster's results.
func TestCoupled_LoadAwareRoutersGiveTheInProcessResults(t *testing.T) {
	var arrivals []cluster.Arrival
	for i := range 400 {
		arrivals = append(arrivals, cluster.Arrival{AtMs: float64(i) * 22,
			Request: cluster.Request{PromptTokens: 512, MaxTokens: 24, Prefix: fmt.Sprintf("conversation-%d", i%32), PrefixTokens: 384}})
	}
	for _, router := range []string{"kv", "least-loaded"} {
		t.Run(router, func(t *testing.T) {
			cfg := cellConfig(router)
			want, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{})
			require.NoError(t, err)
			cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
			got, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{})
			require.NoError(t, err)
			assert.Equal(t, want.Results, got.Results)
			assert.Positive(t, want.Stats.HoldsAborted, "holds abort")
		})
	}
}

// TestCoupled_SteppedClosedLoop: the cluster `mocker run --clock virtual`
// builds over coupled worker processes, its users sending each request at
// the instant their last one ended, gives exactly the in-process
// cluster's results under every router, for both engines, with holds
// aborting; and again with CPU burners beside it. Each case catches one
// way the two could order the events of one instant differently: a
// command applied after the worker's later events (vLLM kv, 128 users), a
// superseded wake-up reported as the worker's next event (kv, 24 users),
// events a run causes at its own instant run in the same step (SGLang,
// 64 users).
func TestCoupled_SteppedClosedLoop(t *testing.T) {
	cases := []struct {
		engine, router string
		vus            int
		endMs          float64
	}{
		{"vllm", "round-robin", 32, 8000},
		{"vllm", "least-loaded", 32, 8000},
		{"vllm", "kv", 24, 8000},
		{"vllm", "kv", 128, 6000},
		{"sglang", "kv", 64, 6000},
		{"sglang", "least-loaded", 64, 6000},
	}
	aborted := 0
	for _, tc := range cases {
		cfg := cellConfig(tc.router)
		cfg.Engine = tc.engine
		want := closedLoop(t, cfg, tc.vus, tc.endMs)
		cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
		got := closedLoop(t, cfg, tc.vus, tc.endMs)
		name := fmt.Sprintf("%s %s, %d users", tc.engine, tc.router, tc.vus)
		assert.Equal(t, want, got, "%s: the in-process cluster's results", name)
		n := 0
		for _, r := range want {
			if r.Outcome == cluster.OutcomeAborted {
				n++
			}
		}
		t.Logf("%s: %d requests, %d holds aborted", name, len(want), n)
		aborted += n
	}
	assert.Positive(t, aborted, "holds abort")

	cfg := cellConfig("kv")
	want := closedLoop(t, cfg, 32, 8000)
	cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
	burnCPU(t)
	got := closedLoop(t, cfg, 32, 8000)
	assert.Equal(t, want, got, "kv: the in-process results with the host busy")
}

// TestCoupled_CommandAtAWorkersInstantComesAfterItsEvents: a request that
// arrives at the very instant the prefill's pass ends reaches the worker
// after that pass's end, as on one queue, where the worker's wake-up was
// queued first: the next pass is the one the waiting request starts, and
// the new request waits for the one after. Sent straight away, the
// command would reach the worker first and join that pass.
func TestCoupled_CommandAtAWorkersInstantComesAfterItsEvents(t *testing.T) {
	cfg := cluster.Config{Engine: "vllm", Disagg: true, Router: "round-robin", Seed: 1,
		Args:    map[string]any{"max_num_batched_tokens": 512, "enable_prefix_caching": false},
		Prefill: cluster.PoolConfig{Workers: 1}, Decode: cluster.PoolConfig{Workers: 1}}
	req := cluster.Request{PromptTokens: 256, MaxTokens: 4}
	// Two of three prompts fit the first pass; the third waits for the
	// second.
	arr := []cluster.Arrival{{Request: req}, {Request: req}, {Request: req}}
	first, err := cluster.RunVirtual(cfg, arr, cluster.VirtualOptions{})
	require.NoError(t, err)
	end := first.Results[0].TTFTMs
	require.Less(t, end, first.Results[2].TTFTMs, "the third prompt waits for the second pass")
	arr = append(arr, cluster.Arrival{AtMs: end, Request: req})
	want, err := cluster.RunVirtual(cfg, arr, cluster.VirtualOptions{})
	require.NoError(t, err)
	require.Equal(t, first.Results[2].TTFTMs, want.Results[2].TTFTMs, "in process, the late arrival misses the second pass")
	cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
	got, err := cluster.RunVirtual(cfg, arr, cluster.VirtualOptions{})
	require.NoError(t, err)
	assert.Equal(t, want.Results, got.Results)
}

// TestCoupled_WallPacedRequestsCostNoHops: cluster.New over coupled worker
// processes runs on the wall clock like any remote cluster, but the round
// trips between processes take no modeled time: one request after another
// on an idle cluster each gets the in-process cluster's TTFT, e2e latency
// and hold, to the nanosecond (arrivals at other wall-clock instants
// round differently).
func TestCoupled_WallPacedRequestsCostNoHops(t *testing.T) {
	run := func(cfg cluster.Config) []cluster.Result {
		c, err := cluster.New(cfg)
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		var out []cluster.Result
		for range 4 {
			r := c.Generate(context.Background(), cluster.Request{PromptTokens: 256, MaxTokens: 8})
			require.Equal(t, cluster.OutcomeCompleted, r.Outcome, r.Error)
			out = append(out, r)
		}
		return out
	}
	cfg := saturatedConfig("vllm")
	cfg.Transport = nil
	want := run(cfg)
	cfg.Transport = &cluster.TransportConfig{Local: true, Coupled: true}
	got := run(cfg)
	for i := range want {
		assert.InDelta(t, want[i].TTFTMs, got[i].TTFTMs, 1e-6, "request %d: TTFT", i)
		assert.InDelta(t, want[i].E2EMs, got[i].E2EMs, 1e-6, "request %d: e2e", i)
		assert.InDelta(t, want[i].HoldMs, got[i].HoldMs, 1e-6, "request %d: hold", i)
	}
}

// TestCoupled_SessionsOnOneSetOfWorkersNumberFromOne: two coupled sessions
// in turn on the same worker processes each number their requests and
// transfers from 1, as a cluster in process does, and give the same
// results, ids included: a worker's transfer server forgets the earlier
// session's rooms, whose ids it would otherwise refuse.
func TestCoupled_SessionsOnOneSetOfWorkersNumberFromOne(t *testing.T) {
	ls := services(t)
	args := []byte(`{"speedup_ratio": 10, "kv_transfer_abort_timeout_ms": 200, "num_gpu_blocks": 512, "max_num_seqs": 2}`)
	startWorkers(t, ls, "renumber",
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: args},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: args})
	cfg := attachConfig(ls, "renumber")
	cfg.Transport.Coupled = true
	cfg.Prefill, cfg.Decode = cluster.PoolConfig{Workers: 1}, cluster.PoolConfig{Workers: 1}
	arrivals := coupledArrivals(40, 30)
	var runs []cluster.VirtualRun
	for range 2 {
		run, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{})
		require.NoError(t, err)
		runs = append(runs, run)
	}
	first := uint64(math.MaxUint64)
	for _, r := range runs[0].Results {
		require.NotEqual(t, cluster.OutcomeError, r.Outcome, r.Error)
		if r.TransferID != 0 {
			first = min(first, r.TransferID)
		}
	}
	assert.Equal(t, uint64(1), first, "transfers numbered from 1")
	assert.Positive(t, runs[0].Stats.HoldsAborted, "holds abort")
	assert.Equal(t, runs[0].Results, runs[1].Results)
}

// TestRemote_ARoomThatCannotOpenFailsItsRequest: a prefill worker whose
// transfer server is out of rooms (--max-rooms) refuses the handoffs past
// its bound; each such request ends as an error naming the bound, the
// others complete, and the run ends with every pool free, coupled or not.
// A coupled refusal once waited behind the connection's own turn for ever.
func TestRemote_ARoomThatCannotOpenFailsItsRequest(t *testing.T) {
	ls := services(t)
	args := []byte(`{"speedup_ratio": 10, "num_gpu_blocks": 512, "max_num_seqs": 8, "kv_transfer_bandwidth": 1, "kv_bytes_per_token": 65536}`)
	startWorkers(t, ls, "rooms",
		worker.Config{Name: "p0", Role: engine.WorkerPrefill, Args: args, MaxRooms: 1},
		worker.Config{Name: "d0", Role: engine.WorkerDecode, Args: args})
	for _, coupled := range []bool{true, false} {
		t.Run(fmt.Sprintf("coupled=%v", coupled), func(t *testing.T) {
			cfg := attachConfig(ls, "rooms")
			cfg.Transport.Coupled = coupled
			cfg.Prefill, cfg.Decode = cluster.PoolConfig{Workers: 1}, cluster.PoolConfig{Workers: 1}
			done := make(chan struct{})
			var run cluster.VirtualRun
			var err error
			go func() {
				defer close(done)
				if coupled {
					run, err = cluster.RunVirtual(cfg, coupledArrivals(12, 5), cluster.VirtualOptions{})
					return
				}
				run.Results, run.Stats, err = generateAll(cfg, coupledArrivals(12, 5))
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the run did not end")
			}
			require.NoError(t, err)
			var refused, completed int
			for _, r := range run.Results {
				switch r.Outcome {
				case cluster.OutcomeError:
					assert.Contains(t, r.Error, "transfer room not opened")
					assert.Contains(t, r.Error, "MaxRooms=1")
					refused++
				case cluster.OutcomeCompleted:
					completed++
				}
			}
			assert.Positive(t, refused, "handoffs past the bound are refused")
			assert.Positive(t, completed, "the others complete")
			assert.Zero(t, run.Stats.HeldBlocks, "no hold left")
			assert.Zero(t, run.Stats.ReservedBlocks, "no reservation left")
		})
	}
}

// generateAll sends every arrival's request at once, whatever its time,
// to a cluster built from cfg on the wall clock, and returns their results
// in order, with the cluster's counters once all have ended.
func generateAll(cfg cluster.Config, arrivals []cluster.Arrival) ([]cluster.Result, cluster.Stats, error) {
	c, err := cluster.New(cfg)
	if err != nil {
		return nil, cluster.Stats{}, err
	}
	defer func() { _ = c.Close() }()
	results := make([]cluster.Result, len(arrivals))
	var wg sync.WaitGroup
	for i, a := range arrivals {
		wg.Go(func() { results[i] = c.Generate(context.Background(), a.Request) })
	}
	wg.Wait()
	return results, c.Stats(), nil
}
