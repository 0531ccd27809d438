package cluster

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvstrand/mocker/kv"
	"github.com/kvstrand/mocker/router"
	"github.com/kvstrand/mocker/router/indexer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// viewCheck counts what checkedView compared across a property run.
type viewCheck struct {
	depths, blocks atomic.Int64 // answers compared
	inFlight       atomic.Int64 // depths a pass in flight changed
	dropped        atomic.Int64 // Stored events the index dropped for an unknown parent
	cpuEvents      atomic.Int64 // events of a host tier (CPU medium) fed to the index
	lowerEvents    atomic.Int64 // events of the tiers below it (DISK, EXTERNAL) fed to the index
	firstMismatch  atomic.Pointer[string]
	mismatches     atomic.Int64
}

func (vc *viewCheck) mismatch(format string, args ...any) {
	vc.mismatches.Add(1)
	msg := fmt.Sprintf(format, args...)
	vc.firstMismatch.CompareAndSwap(nil, &msg)
}

// checkedView answers as the index fed the worker's KV events does, and
// records every time the worker's view answers otherwise.
type checkedView struct {
	id    uint64
	view  kvView
	index *indexer.Indexer
	vc    *viewCheck
}

// outside fails if the worker changed its cache outside a pass, where a
// view cannot place the change.
func (v checkedView) outside(t require.TestingT) {
	require.Zero(t, v.view.view.Outside(), "worker %d: cache changes outside a pass", v.id)
}

func (v checkedView) Depth(locals []kv.LocalHash, seqs []kv.SeqHash) int {
	want := 0
	for _, s := range v.index.FindMatches(locals, false, nil) {
		if s.Worker == v.id {
			want = s.Depth
		}
	}
	got := v.view.Depth(locals, seqs)
	v.vc.depths.Add(1)
	if got != want {
		v.vc.mismatch("worker %d: view depth %d, index %d (of %d blocks, pass in flight %v)",
			v.id, got, want, len(seqs), v.view.v.InFlight(v.view.idx))
	}
	if v.view.view.Depth(seqs, false) != got {
		v.vc.inFlight.Add(1)
	}
	return want
}

func (v checkedView) Blocks() int {
	want := v.index.TreeSize(v.id)
	v.vc.blocks.Add(1)
	if got := v.view.Blocks(); got != want {
		v.vc.mismatch("worker %d: view holds %d blocks, index %d", v.id, got, want)
	}
	return want
}

// checkedRun runs arr on cfg with every in-process worker's view checked,
// at every routing decision, against an index fed the worker's KV events.
func checkedRun(t require.TestingT, cfg Config, arr []Arrival, vc *viewCheck) VirtualRun {
	index := indexer.New()
	var views []checkedView
	opts := options{virtual: true, memory: true, keepEvents: true, shareTokens: true,
		kvTap: func(id uint64, ev kv.Event) {
			switch ev.Medium {
			case kv.MediumGPU:
			case kv.MediumCPU:
				vc.cpuEvents.Add(1)
			default:
				vc.lowerEvents.Add(1)
			}
			if err := index.Apply(id, ev); errors.Is(err, indexer.ErrUnknownParent) {
				vc.dropped.Add(1)
			}
		},
		kvWrap: func(id uint64, v router.KVView) router.KVView {
			cv := checkedView{id: id, view: v.(kvView), index: index, vc: vc}
			views = append(views, cv)
			return cv
		},
	}
	run, err := runArrivals(cfg, arr, opts)
	require.NoError(t, err)
	require.NotEmpty(t, views, "the workers offer views")
	for _, v := range views {
		v.outside(t)
	}
	return run
}

// TestKVView_AnswersAsTheEventFedIndex: a router reading in-process
// workers' views decides exactly as one replaying their KV events into its
// index. At every decision each view's answers (prefix depth and blocks
// held) equal the index's, with passes in flight whose events are still to
// come and Stored events the index drops; and a run with views gives
// byte-identical results, log and stats to one with the index.
func TestKVView_AnswersAsTheEventFedIndex(t *testing.T) {
	var vc viewCheck
	// A case rapid once found, run first so that every run meets a
	// Stored event the index drops: on one vLLM worker with a 24-block
	// pool, a prompt of ten whole blocks arrives 27 times in one instant,
	// so its last block is recomputed into private copies, and the blocks
	// its outputs fill are stored under parents the pool has evicted.
	t.Run("dropped_stored_events", func(t *testing.T) {
		cfg := Config{Workers: 1, Router: "kv", Seed: 7, Args: map[string]any{
			"block_size": 4, "num_gpu_blocks": 24, "max_num_seqs": 2, "enable_chunked_prefill": false,
			"max_num_batched_tokens": 64, "kv_transfer_abort_timeout_ms": 20}}
		long := promptTokens(Request{PromptTokens: 40, Prefix: "r", PrefixTokens: 32}, 7, 1)
		short := promptTokens(Request{PromptTokens: 2, Prefix: "r", PrefixTokens: 2}, 7, 2)
		var arr []Arrival
		add := func(tokens []uint32, maxTokens, times int) {
			for range times {
				req := Request{Tokens: tokens, MaxTokens: maxTokens}
				if tokens == nil {
					req = Request{PromptTokens: 1, Prefix: "p0", MaxTokens: maxTokens}
				}
				arr = append(arr, Arrival{Request: req})
			}
		}
		add(short, 1, 1)
		add(nil, 1, 2)
		add(short, 1, 3)
		add(short, 24, 1)
		add(long, 1, 16)
		add(long, 24, 1)
		add(long, 1, 9)
		add(long, 5, 1)
		checkViewCase(t, cfg, arr, &vc)
		require.Positive(t, vc.dropped.Load(), "the index dropped a Stored event")
	})
	// With a host tier the workers also announce blocks moving to it and
	// leaving it (CPU medium). The index ignores them, so it still answers
	// as the views, which model the GPU pool alone, and routes the same.
	t.Run("host_tier_events", func(t *testing.T) {
		cfg := Config{Workers: 2, Router: "kv", Seed: 7, Args: map[string]any{
			"block_size": 4, "num_gpu_blocks": 32, "num_g2_blocks": 24, "max_num_seqs": 4,
			"kv_bytes_per_token": 131072}}
		var arr []Arrival
		for i := range 160 {
			arr = append(arr, Arrival{AtMs: float64(20 * i), Request: Request{PromptTokens: 40 + i%3, MaxTokens: 4,
				Prefix: fmt.Sprintf("p%d", i%7), PrefixTokens: 32}})
		}
		before := vc.cpuEvents.Load()
		checkViewCase(t, cfg, arr, &vc)
		require.Positive(t, vc.cpuEvents.Load()-before, "the index was fed host tier events")
	})
	// So with a disk tier and object storage below the host tier: their
	// events (DISK, EXTERNAL) are ignored too.
	t.Run("lower_tier_events", func(t *testing.T) {
		cfg := Config{Workers: 2, Router: "kv", Seed: 7, Args: map[string]any{
			"block_size": 4, "num_gpu_blocks": 32, "num_g2_blocks": 8, "num_g3_blocks": 24,
			"enable_g4_storage": true, "max_num_seqs": 4, "kv_bytes_per_token": 131072}}
		var arr []Arrival
		for i := range 160 {
			arr = append(arr, Arrival{AtMs: float64(20 * i), Request: Request{PromptTokens: 40 + i%3, MaxTokens: 4,
				Prefix: fmt.Sprintf("p%d", i%7), PrefixTokens: 32}})
		}
		before := vc.lowerEvents.Load()
		checkViewCase(t, cfg, arr, &vc)
		require.Positive(t, vc.lowerEvents.Load()-before, "the index was fed disk and object storage events")
		run, err := RunVirtual(cfg, arr, VirtualOptions{})
		require.NoError(t, err)
		st := run.Stats
		assert.Equal(t, 48, st.G3Capacity, "two workers' disk tiers")
		assert.Positive(t, st.G3Blocks)
		assert.Positive(t, st.G4Blocks)
		assert.Positive(t, st.G3Onboarded+st.G4Onboarded, "hits found below the host tiers")
		for _, w := range st.Workers {
			assert.Equal(t, 24, w.G3Capacity)
		}
	})
	rapid.Check(t, func(rt *rapid.T) {
		eng := rapid.SampledFrom([]string{"vllm", "sglang"}).Draw(rt, "engine")
		bs := rapid.SampledFrom([]int{4, 16, 64}).Draw(rt, "block_size")
		args := map[string]any{
			"block_size":             bs,
			"num_gpu_blocks":         rapid.IntRange(24, 400).Draw(rt, "num_gpu_blocks"),
			"max_num_seqs":           rapid.IntRange(1, 16).Draw(rt, "max_num_seqs"),
			"enable_chunked_prefill": rapid.Bool().Draw(rt, "chunked"),
			"max_num_batched_tokens": rapid.IntRange(64, 2048).Draw(rt, "max_num_batched_tokens"),
			"kv_bytes_per_token":     131072, "kv_transfer_bandwidth": 25,
			"kv_transfer_abort_timeout_ms": rapid.IntRange(20, 400).Draw(rt, "abort_ms"),
		}
		if eng == "sglang" && rapid.Bool().Draw(rt, "optimistic") {
			args["sglang"] = map[string]any{"optimistic_prefill": true}
		}
		ropts := map[string]any{"router_temperature": rapid.SampledFrom([]float64{0, 0.5}).Draw(rt, "temperature")}
		var cfg Config
		if rapid.Bool().Draw(rt, "disagg") {
			cfg = Config{Engine: eng, Disagg: true, Router: "kv", Seed: 7, Args: args, RouterOptions: ropts,
				Prefill: PoolConfig{Workers: rapid.IntRange(1, 3).Draw(rt, "prefills")},
				Decode:  PoolConfig{Workers: 1, Args: map[string]any{"num_gpu_blocks": 2048}}}
		} else {
			cfg = Config{Engine: eng, Workers: rapid.IntRange(1, 3).Draw(rt, "workers"), Router: "kv", Seed: 7, Args: args, RouterOptions: ropts}
		}
		// Prompts from a few shared prefixes, some of them repeated word
		// for word so that two copies of a block are computed in one pass,
		// arriving in bursts at shared instants.
		n := rapid.IntRange(1, 120).Draw(rt, "requests")
		arr := make([]Arrival, n)
		repeats := make([][]uint32, 4)
		at := 0.0
		for i := range arr {
			if rapid.IntRange(0, 3).Draw(rt, "gap") == 0 {
				at += float64(rapid.IntRange(0, 400).Draw(rt, "gap_ms"))
			}
			req := Request{MaxTokens: rapid.IntRange(1, 24).Draw(rt, "max_tokens")}
			if k := rapid.IntRange(0, 7).Draw(rt, "repeat"); k < len(repeats) {
				if repeats[k] == nil {
					// A prompt of whole blocks recomputes its last block:
					// a repeat's copy of it is private, and the blocks
					// its output fills are stored under a parent the
					// pool may have evicted.
					l := rapid.IntRange(2, 600).Draw(rt, "repeat_len")
					if rapid.Bool().Draw(rt, "whole_blocks") {
						l = bs * rapid.IntRange(1, 600/bs).Draw(rt, "repeat_blocks")
					}
					repeats[k] = promptTokens(Request{PromptTokens: l, Prefix: "r", PrefixTokens: min(l, 32)}, 7, uint64(k+1))
				}
				req.Tokens = repeats[k]
			} else {
				req.PromptTokens = rapid.IntRange(1, 600).Draw(rt, "prompt")
				req.Prefix = fmt.Sprintf("p%d", rapid.IntRange(0, 2).Draw(rt, "prefix"))
				req.PrefixTokens = rapid.IntRange(0, req.PromptTokens).Draw(rt, "prefix_tokens")
			}
			arr[i] = Arrival{AtMs: at, Request: req}
		}
		checkViewCase(rt, cfg, arr, &vc)
	})
	// The cases that set a view apart from the pool were met.
	assert.Positive(t, vc.depths.Load(), "depths compared")
	assert.Positive(t, vc.blocks.Load(), "tree sizes compared (kv ties)")
	assert.Positive(t, vc.inFlight.Load(), "depths a pass in flight changed")
	assert.Positive(t, vc.dropped.Load(), "Stored events the index dropped for an unknown parent")
	t.Logf("compared %d depths (%d changed by a pass in flight) and %d tree sizes; the index dropped %d events",
		vc.depths.Load(), vc.inFlight.Load(), vc.blocks.Load(), vc.dropped.Load())
}

// checkViewCase runs arr on cfg three ways and fails unless every view
// answered as the index at every decision, and the runs with views, with
// the index, and with views checked against it give the same results.
func checkViewCase(t require.TestingT, cfg Config, arr []Arrival, vc *viewCheck) {
	checked := checkedRun(t, cfg, arr, vc)
	if m := vc.firstMismatch.Load(); m != nil {
		require.Failf(t, "views differ from the index", "%d answers differ; the first: %s", vc.mismatches.Load(), *m)
	}
	viewed, err := RunVirtual(cfg, arr, VirtualOptions{EventLog: true})
	require.NoError(t, err)
	indexed, err := runArrivals(cfg, arr, options{virtual: true, memory: true, keepEvents: true, shareTokens: true, kvEvents: true})
	require.NoError(t, err)
	want := runJSON(t, indexed)
	require.Equal(t, want, runJSON(t, viewed), "views and index route alike")
	require.Equal(t, want, runJSON(t, checked), "the checked run routes by the index")
}

// TestKVView_OnlyWhereEventsFeedTheIndex: the router reads views of the
// workers that announce blocks (vLLM's and SGLang's, not decode workers,
// not with prefix caching off), and only when its index is fed by KV
// events; the approximate mode keeps learning from its own decisions.
func TestKVView_OnlyWhereEventsFeedTheIndex(t *testing.T) {
	views := func(cfg Config) map[string]bool {
		c, err := newClusterOf(cfg, options{virtual: true, stepped: true, memory: true})
		require.NoError(t, err)
		defer c.Close()
		out := map[string]bool{}
		for _, n := range c.workers {
			ws, ok := c.router.Worker(n.id)
			require.True(t, ok)
			out[n.label()] = ws.KVView
		}
		return out
	}
	disagg := Config{Disagg: true, Router: "kv", Prefill: PoolConfig{Workers: 2}, Decode: PoolConfig{Workers: 1}}
	assert.Equal(t, map[string]bool{"prefill-0": true, "prefill-1": true, "decode-0": false}, views(disagg))
	agg := Config{Workers: 2, Router: "kv"}
	assert.Equal(t, map[string]bool{"worker-0": true, "worker-1": true}, views(agg))
	approx := agg
	approx.RouterOptions = map[string]any{"use_kv_events": false}
	assert.Equal(t, map[string]bool{"worker-0": false, "worker-1": false}, views(approx))
	off := agg
	off.Args = map[string]any{"enable_prefix_caching": false}
	assert.Equal(t, map[string]bool{"worker-0": false, "worker-1": false}, views(off))
	sg := Config{Engine: "sglang", Disagg: true, Router: "kv", Prefill: PoolConfig{Workers: 1}, Decode: PoolConfig{Workers: 1}}
	assert.Equal(t, map[string]bool{"prefill-0": true, "decode-0": false}, views(sg))
}
