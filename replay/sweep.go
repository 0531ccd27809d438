package replay

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"sync"

	"github.com/kvstrand/mocker/cluster"
)

// MaxCombinations bounds a sweep's grid: past it a grid is more likely a
// mistake than a plan.
const MaxCombinations = 10000

// Axis is one config key of a sweep and the values it takes.
type Axis struct {
	// Key is a dotted path into the cluster config ("prefill.workers",
	// "args.kv_transfer_abort_timeout_ms").
	Key    string
	Values []any
}

// ParseGrid reads a grid: comma-separated KEY=VALUES, where VALUES is
// "a..b" (the integers from a to b), "x|y|z" or one value. A value that
// reads as JSON (a number, true, false) is that; any other is a string.
func ParseGrid(s string) ([]Axis, error) {
	var grid []Axis
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("--grid %q: want KEY=a..b or KEY=x|y|z", part)
		}
		if seen[k] {
			return nil, fmt.Errorf("--grid: %s given twice", k)
		}
		seen[k] = true
		ax := Axis{Key: k}
		if lo, hi, ok := strings.Cut(v, ".."); ok {
			a, err1 := strconv.Atoi(strings.TrimSpace(lo))
			b, err2 := strconv.Atoi(strings.TrimSpace(hi))
			if err1 != nil || err2 != nil || b < a || b-a >= MaxCombinations {
				return nil, fmt.Errorf("--grid %s=%s: want a..b with integers a ≤ b", k, v)
			}
			for i := a; i <= b; i++ {
				ax.Values = append(ax.Values, json.Number(strconv.Itoa(i)))
			}
		} else {
			for _, x := range strings.Split(v, "|") {
				ax.Values = append(ax.Values, gridValue(strings.TrimSpace(x)))
			}
		}
		grid = append(grid, ax)
	}
	n := 1
	for _, ax := range grid {
		n *= len(ax.Values)
		if n > MaxCombinations {
			return nil, fmt.Errorf("--grid: more than %d combinations", MaxCombinations)
		}
	}
	return grid, nil
}

func gridValue(s string) any {
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return json.Number(s)
	}
	return s
}

// Combinations lists every combination of the grid's values, the last
// axis varying fastest.
func Combinations(grid []Axis) [][]any {
	out := [][]any{{}}
	for _, ax := range grid {
		var next [][]any
		for _, c := range out {
			for _, v := range ax.Values {
				next = append(next, append(append([]any(nil), c...), v))
			}
		}
		out = next
	}
	return out
}

// WithValues returns a copy of base (a config as a JSON object) with each
// axis's key set to its value in combo: nested objects are created as
// needed and copied, never shared with base.
func WithValues(base map[string]any, grid []Axis, combo []any) (map[string]any, error) {
	m := deepCopy(base)
	for i, ax := range grid {
		path := strings.Split(ax.Key, ".")
		obj := m
		for j, k := range path[:len(path)-1] {
			next, ok := obj[k].(map[string]any)
			if !ok {
				if obj[k] != nil {
					return nil, fmt.Errorf("--grid %s: %s is not an object", ax.Key, strings.Join(path[:j+1], "."))
				}
				next = map[string]any{}
				obj[k] = next
			}
			obj = next
		}
		obj[path[len(path)-1]] = combo[i]
	}
	return m, nil
}

func deepCopy(m map[string]any) map[string]any {
	out := maps.Clone(m)
	for k, v := range out {
		if o, ok := v.(map[string]any); ok {
			out[k] = deepCopy(o)
		}
	}
	return out
}

// Row is one combination's figures.
type Row struct {
	// Values are the combination's values, in the grid's order.
	Values []any `json:"values"`
	// GPUs counts the workers' data-parallel ranks: one GPU each.
	GPUs    int     `json:"gpus"`
	Summary Summary `json:"summary"`
	// GoodputPerGPU is Summary.Goodput over GPUs (request throughput when
	// no SLO is given).
	GoodputPerGPU float64 `json:"goodput_per_gpu"`
	// Pareto says no other row has both more goodput per GPU and a lower
	// TTFT p90, with one of them strictly.
	Pareto bool   `json:"pareto"`
	Error  string `json:"error,omitempty"`
}

// Sweep replays the trace through one cluster per combination of the
// grid over base, running up to parallel of them at once; open gives each
// run its own reader. Rows come in the combinations' order whatever the
// parallelism, so the output is the same on any number of cores. A
// combination whose config is refused gets a row with Error; a trace
// error ends the sweep.
func Sweep(base map[string]any, grid []Axis, open func() (*Reader, func() error, error), opts Options, parallel int) ([]Row, error) {
	combos := Combinations(grid)
	rows := make([]Row, len(combos))
	errs := make([]error, len(combos))
	parallel = max(1, min(parallel, len(combos)))
	work := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for i := range work {
				rows[i], errs[i] = sweepOne(base, grid, combos[i], open, opts)
			}
		})
	}
	for i := range combos {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	markPareto(rows)
	return rows, nil
}

func sweepOne(base map[string]any, grid []Axis, combo []any, open func() (*Reader, func() error, error), opts Options) (Row, error) {
	row := Row{Values: combo}
	m, err := WithValues(base, grid, combo)
	if err != nil {
		row.Error = err.Error()
		return row, nil
	}
	cfg, err := cluster.ConfigFromMap(m)
	var plan cluster.Plan
	if err == nil {
		plan, err = cfg.Plan()
	}
	if err != nil {
		row.Error = err.Error()
		return row, nil
	}
	tr, closeTrace, err := open()
	if err != nil {
		return row, err
	}
	defer func() { _ = closeTrace() }()
	opts.Progress, opts.OnRequest = nil, nil
	out, err := runPlan(plan, tr, opts)
	if err != nil {
		return row, err
	}
	row.Summary = out.Summary
	row.GPUs = len(out.Run.Stats.Workers)
	good := out.Summary.Goodput
	if !out.Summary.SLO.given() {
		good = out.Summary.RequestThroughput
	}
	if row.GPUs > 0 {
		row.GoodputPerGPU = good / float64(row.GPUs)
	}
	return row, nil
}

// markPareto marks the rows no other row dominates in goodput per GPU
// (more is better) and TTFT p90 (less is better).
func markPareto(rows []Row) {
	for i := range rows {
		a := &rows[i]
		if a.Error != "" || a.Summary.Completed == 0 {
			continue
		}
		a.Pareto = true
		for j := range rows {
			b := &rows[j]
			if j == i || b.Error != "" || b.Summary.Completed == 0 {
				continue
			}
			if b.GoodputPerGPU >= a.GoodputPerGPU && b.Summary.TTFT.P90 <= a.Summary.TTFT.P90 &&
				(b.GoodputPerGPU > a.GoodputPerGPU || b.Summary.TTFT.P90 < a.Summary.TTFT.P90) {
				a.Pareto = false
				break
			}
		}
	}
}

// sweepColumns are the figures of a sweep's CSV, after the grid's keys.
var sweepColumns = []string{"gpus", "requests", "completed", "aborted", "rejected",
	"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p90_ms", "e2e_p90_ms",
	"request_throughput", "output_token_throughput", "goodput", "goodput_per_gpu",
	"prefix_cache_hit_rate", "kv_holds", "kv_aborted", "peak_held_blocks", "prefill_refusals", "pareto", "error"}

// WriteCSV writes one row per combination: the grid's keys, then
// sweepColumns.
func WriteCSV(w io.Writer, grid []Axis, rows []Row) error {
	cw := csv.NewWriter(w)
	head := make([]string, 0, len(grid)+len(sweepColumns))
	for _, ax := range grid {
		head = append(head, ax.Key)
	}
	if err := cw.Write(append(head, sweepColumns...)); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	u := func(x uint64) string { return strconv.FormatUint(x, 10) }
	for _, r := range rows {
		rec := make([]string, 0, len(head)+len(sweepColumns))
		for _, v := range r.Values {
			rec = append(rec, fmt.Sprint(v))
		}
		s := r.Summary
		rec = append(rec, strconv.Itoa(r.GPUs), u(s.Requests), u(s.Completed), u(s.Aborted), u(s.Rejected),
			f(s.TTFT.P50), f(s.TTFT.P90), f(s.TTFT.P99), f(s.ITL.P90), f(s.E2E.P90),
			f(s.RequestThroughput), f(s.OutputTokenThroughput), f(s.Goodput), f(r.GoodputPerGPU),
			f(s.PrefixCacheHitRate), u(s.KV.Holds), u(s.KV.Aborted), strconv.Itoa(s.KV.PeakHeldBlocks), u(s.KV.PrefillRefusals),
			strconv.FormatBool(r.Pareto), r.Error)
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
