package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kvstrand/mocker/replay"
	"github.com/kvstrand/mocker/report"
)

// sweepUsage is `mocker sweep -h`.
const sweepUsage = `Usage: mocker sweep --trace FILE --config FILE --grid GRID [flags]

Replays the trace through one cluster per combination of the grid's values
over the base config, on virtual time, several at once, and writes one row
per combination: the grid's values, the GPUs (workers' ranks), latencies,
throughput, goodput per GPU, the KV-handoff figures, and whether the row is
on the Pareto front of goodput per GPU against TTFT p90. The rows are the
same, in the same order, on any number of cores.

  --grid 'prefill.workers=1..4,decode.workers=2..8,router=kv|round-robin,args.kv_transfer_abort_timeout_ms=500|2000'

Flags:
      --trace FILE              the trace, as mocker replay reads it (required)
      --config FILE             the base cluster config, JSON or YAML (required)
      --grid GRID               comma-separated KEY=a..b or KEY=x|y|z; KEY is a
                                dotted path into the config (required)
      --trace-block-size N      tokens per hash id (default 512)
      --rate-scale X            divide arrival times by X
      --max-requests N          send at most N requests per run
      --duration D              send no request at or after modeled time D
      --seed N                  the clusters' seed (over the config's)
      --slo ttft=MS,itl=MS,e2e=MS
                                latency bounds for goodput (without: goodput
                                per GPU is request throughput per GPU)
      --parallel N              runs at once (default: the CPUs)
      --csv FILE                write the rows as CSV to FILE (default stdout)
      --json FILE               write the rows, every figure, as JSON to FILE
      --html FILE               write a page of goodput per GPU against TTFT p90,
                                the Pareto front marked, and the stranding
                                figures of each configuration
`

func sweepCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	f := addTraceFlags(fs)
	gridSpec := fs.String("grid", "", "")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "")
	csvPath := fs.String("csv", "", "")
	jsonPath := fs.String("json", "", "")
	htmlPath := fs.String("html", "", "")
	if code, ok := parseCommand("sweep", sweepUsage, fs, f, args, stdout, stderr); !ok {
		return code
	}
	fail := failWith("sweep", stderr)
	if *gridSpec == "" {
		fmt.Fprintf(stderr, "mocker sweep: --grid is required\n\n%s", sweepUsage)
		return exitUsage
	}
	grid, err := replay.ParseGrid(*gridSpec)
	if err != nil {
		return fail(err)
	}
	m, _, opts, err := f.load()
	if err != nil {
		return fail(err)
	}
	if *parallel < 1 {
		return fail(fmt.Errorf("--parallel: want ≥ 1, got %d", *parallel))
	}
	rows, err := replay.Sweep(m, grid, f.openTrace, opts, *parallel)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", f.trace, err))
	}
	if *csvPath == "" {
		*csvPath = "-"
	}
	outs := []struct {
		flag, path string
		write      func(io.Writer) error
	}{
		{"--csv", *csvPath, func(w io.Writer) error { return replay.WriteCSV(w, grid, rows) }},
		{"--json", *jsonPath, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Grid []replay.Axis `json:"grid"`
				Rows []replay.Row  `json:"rows"`
			}{grid, rows})
		}},
		{"--html", *htmlPath, func(w io.Writer) error {
			return report.WriteSweep(w, filepath.Base(f.trace), sweepPoints(grid, rows))
		}},
	}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if err := writeOut(o.flag, o.path, stdout, o.write); err != nil {
			return fail(err)
		}
	}
	return 0
}

// sweepPoints are the rows as the sweep page draws them.
func sweepPoints(grid []replay.Axis, rows []replay.Row) []report.SweepPoint {
	pts := make([]report.SweepPoint, len(rows))
	for i, r := range rows {
		label := make([]string, len(grid))
		for j, ax := range grid {
			label[j] = fmt.Sprintf("%s=%v", ax.Key, r.Values[j])
		}
		k := r.Summary.KV
		pts[i] = report.SweepPoint{Label: strings.Join(label, " "), GPUs: r.GPUs, GoodputPerGPU: r.GoodputPerGPU,
			TTFTP90Ms: r.Summary.TTFT.P90, Pareto: r.Pareto, Holds: k.Holds, Aborted: k.Aborted,
			PeakHeldBlocks: k.PeakHeldBlocks, PrefillRefusals: k.PrefillRefusals, Error: r.Error}
	}
	return pts
}
