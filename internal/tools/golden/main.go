// Command golden writes the modeled output of this tree to a directory, for
// comparing two versions of mocker byte for byte: RunVirtual's results,
// stats, series and event log for a set of cluster shapes (both engines,
// aggregated and disaggregated, every router mode, dp ranks, heavy
// aborts), and the summary export, NDJSON and text summary of every
// script in scripts/ and of xk6mocker/testdata/bench_aggregated.js on the
// virtual clock. A change meant only to make mocker faster must leave all
// of it as it was:
//
//	go run ./internal/tools/golden -out /tmp/before   # on the base commit
//	go run ./internal/tools/golden -out /tmp/after    # on the change
//	diff -r /tmp/before /tmp/after
//
// Run it from the module's root.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/harness"
	_ "github.com/kvstrand/mocker/xk6mocker" // k6/x/mocker
)

func main() {
	out := flag.String("out", "", "directory to write the outputs to (made if missing)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/tools/golden -out DIR (from the module's root)")
		os.Exit(2)
	}
	if err := write(*out, shapes(), scripts()); err != nil {
		fmt.Fprintf(os.Stderr, "golden: %v\n", err)
		os.Exit(1)
	}
}

// shape is one RunVirtual run: a cluster and a trace of arrivals, n of
// them gapMs apart, prompts of 400–1,299 tokens (two in three sharing one
// of three prefixes when prefixed) and 1 to maxOut output tokens.
type shape struct {
	name     string
	cfg      cluster.Config
	n        int
	gapMs    float64
	prefixed bool
	maxOut   int
}

func disaggArgs(extra map[string]any) map[string]any {
	m := map[string]any{"num_gpu_blocks": 2048, "max_num_seqs": 32, "kv_transfer_abort_timeout_ms": 1500,
		"kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 25}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func aggArgs(extra map[string]any) map[string]any {
	m := map[string]any{"num_gpu_blocks": 1024, "max_num_seqs": 8}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func shapes() []shape {
	pools := func(p, d int) (cluster.PoolConfig, cluster.PoolConfig) {
		return cluster.PoolConfig{Workers: p}, cluster.PoolConfig{Workers: d}
	}
	disagg := func(engine, router string, seed uint64, extra map[string]any, p, d int) cluster.Config {
		pp, dp := pools(p, d)
		return cluster.Config{Engine: engine, Disagg: true, Router: router, Seed: seed, Args: disaggArgs(extra), Prefill: pp, Decode: dp}
	}
	agg := func(engine, router string, seed uint64, workers int, extra map[string]any) cluster.Config {
		return cluster.Config{Engine: engine, Workers: workers, Router: router, Seed: seed, Args: aggArgs(extra)}
	}
	return []shape{
		{"vllm-disagg-kv", disagg("", "kv", 1, nil, 2, 2), 1500, 6, true, 80},
		{"vllm-disagg-round-robin", disagg("", "round-robin", 2, nil, 2, 2), 1200, 8, true, 60},
		{"vllm-disagg-random", disagg("", "random", 3, nil, 3, 1), 1000, 10, false, 50},
		{"vllm-disagg-least-loaded", disagg("", "least-loaded", 4, nil, 2, 2), 1000, 7, true, 70},
		{"vllm-disagg-heavy-aborts", disagg("", "kv", 5, map[string]any{"kv_transfer_abort_timeout_ms": 300}, 2, 1), 1500, 3, true, 120},
		{"vllm-agg-kv", agg("", "kv", 6, 4, nil), 1500, 8, true, 48},
		{"vllm-agg-round-robin", agg("", "round-robin", 7, 3, nil), 1000, 10, false, 40},
		{"vllm-agg-power-of-two", agg("", "power-of-two", 12, 3, nil), 1000, 9, true, 40},
		{"sglang-disagg-kv", disagg("sglang", "kv", 8, nil, 2, 2), 1200, 6, true, 80},
		{"sglang-agg-kv", agg("sglang", "kv", 9, 3, nil), 1200, 8, true, 48},
		{"vllm-disagg-dp", disagg("", "kv", 10, map[string]any{"dp_size": 2}, 1, 1), 1000, 8, true, 60},
		{"vllm-agg-dp", agg("", "kv", 11, 2, map[string]any{"dp_size": 2}), 1000, 8, true, 40},
	}
}

func (s shape) arrivals() []cluster.Arrival {
	arr := make([]cluster.Arrival, s.n)
	for i := range arr {
		r := cluster.Request{PromptTokens: 400 + (i*37)%900, MaxTokens: 1 + (i*13)%s.maxOut}
		if s.prefixed && i%3 != 0 {
			r.Prefix, r.PrefixTokens = []string{"a", "b", "c"}[i%3], 200
		}
		arr[i] = cluster.Arrival{AtMs: float64(i) * s.gapMs, Request: r}
	}
	return arr
}

// scripts are the scripts whose summaries are compared, relative to the
// module's root.
func scripts() []string {
	list, _ := filepath.Glob(filepath.Join("scripts", "*.js"))
	return append(list, filepath.Join("xk6mocker", "testdata", "bench_aggregated.js"))
}

func write(out string, shapes []shape, scripts []string) error {
	for _, s := range shapes {
		run, err := cluster.RunVirtual(s.cfg, s.arrivals(), cluster.VirtualOptions{EventLog: true})
		if err != nil {
			return fmt.Errorf("shape %s: %w", s.name, err)
		}
		dir := filepath.Join(out, "cluster", s.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, v := range map[string]any{"results": run.Results, "stats": run.Stats, "series": run.Series, "events": run.Events} {
			b, err := json.MarshalIndent(v, "", " ")
			if err != nil {
				return fmt.Errorf("shape %s, %s: %w", s.name, name, err)
			}
			if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
				return err
			}
		}
	}
	if len(scripts) == 0 {
		return nil
	}
	dir := filepath.Join(out, "scripts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, path := range scripts {
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%w (run from the module's root)", err)
		}
		base := filepath.Join(dir, strings.TrimSuffix(filepath.Base(path), ".js"))
		var stdout, stderr bytes.Buffer
		err = harness.Run(context.Background(), harness.Config{
			Script: abs, Env: map[string]string{}, Clock: harness.ClockVirtual, Quiet: true, NoColor: true,
			Stdout: &stdout, Stderr: &stderr, SummaryExport: base + ".summary.json", Outputs: []string{"json=" + base + ".ndjson"},
		})
		// A crossed threshold is part of the output, exit code and all;
		// anything else is not a run to compare. Stderr is left out: it
		// says how long the run took on this host.
		code := harness.ExitCode(err)
		if code != harness.ExitOK && code != harness.ExitThresholdsFailed {
			return fmt.Errorf("%s: %w\n%s", path, err, stderr.String())
		}
		fmt.Fprintf(&stdout, "\nexit code %d\n", code)
		if err := os.WriteFile(base+".stdout", stdout.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
