package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/replay"
	"github.com/kvstrand/mocker/report"
)

// replayUsage is `mocker replay -h`.
const replayUsage = `Usage: mocker replay --trace FILE --config FILE [flags]

Replays a request trace through a mock cluster on virtual time, as fast as
the CPU allows, and prints an aiperf-style summary. The same trace, config
and flags give the same output, byte for byte. Formats: docs/replay.md.

Flags:
      --trace FILE              the trace: Mooncake JSONL (hash_ids, optional
                                session_id and delay), or CSV with a header;
                                gzip is read as such (required)
      --config FILE             the cluster config, JSON or YAML: the object
                                mocker.cluster({...}) takes (required)
      --trace-block-size N      tokens per hash id (default 512)
      --rate-scale X            divide arrival times by X: 2 sends twice as fast
      --max-requests N          send at most N requests
      --duration D              send no request at or after modeled time D (e.g. 10m)
      --seed N                  the cluster's seed (over the config's)
      --slo ttft=MS,itl=MS,e2e=MS
                                latency bounds for goodput (any subset)
      --json FILE               write every figure as JSON to FILE ("-": stdout)
      --report FILE             write an HTML report of the run to FILE
`

// traceFlags are the flags replay and sweep share: the trace, the base
// config and how the trace is played.
type traceFlags struct {
	trace, config, seed, slo string
	blockSize, maxRequests   int
	rate                     float64
	duration                 time.Duration
}

func addTraceFlags(fs *flag.FlagSet) *traceFlags {
	f := &traceFlags{}
	fs.StringVar(&f.trace, "trace", "", "")
	fs.StringVar(&f.config, "config", "", "")
	fs.IntVar(&f.blockSize, "trace-block-size", replay.DefaultBlockSize, "")
	fs.Float64Var(&f.rate, "rate-scale", 1, "")
	fs.IntVar(&f.maxRequests, "max-requests", 0, "")
	fs.DurationVar(&f.duration, "duration", 0, "")
	fs.StringVar(&f.seed, "seed", "", "")
	fs.StringVar(&f.slo, "slo", "", "")
	return f
}

// parseCommand parses args into fs, printing usage on -h and naming the
// mistake otherwise; ok false returns code.
func parseCommand(name, usage string, fs *flag.FlagSet, f *traceFlags, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0, false
		}
		fmt.Fprintf(stderr, "mocker %s: %v\n\n%s", name, err, usage)
		return exitUsage, false
	}
	if f.trace == "" || f.config == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mocker %s: --trace and --config are required, and nothing else\n\n%s", name, usage)
		return exitUsage, false
	}
	return 0, true
}

// configMap reads --config as a JSON object, applying --seed.
func (f *traceFlags) configMap() (map[string]any, error) {
	m, err := readConfigMap(f.config)
	if err != nil {
		return nil, err
	}
	if f.seed != "" {
		v, err := strconv.ParseInt(f.seed, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--seed: want an integer ≥ 0, got %q", f.seed)
		}
		m["seed"] = json.Number(strconv.FormatInt(v, 10))
	}
	return m, nil
}

// options are the replay options the flags give.
func (f *traceFlags) options() (replay.Options, error) {
	slo, err := replay.ParseSLO(f.slo)
	return replay.Options{BlockSize: f.blockSize, RateScale: f.rate, MaxRequests: f.maxRequests,
		DurationMs: float64(f.duration) / float64(time.Millisecond), SLO: slo}, err
}

// load reads --config (with --seed) and the replay options the flags give.
func (f *traceFlags) load() (map[string]any, cluster.Config, replay.Options, error) {
	m, err := f.configMap()
	if err != nil {
		return nil, cluster.Config{}, replay.Options{}, err
	}
	cfg, err := clusterConfig(f.config, m)
	if err != nil {
		return nil, cluster.Config{}, replay.Options{}, err
	}
	opts, err := f.options()
	return m, cfg, opts, err
}

// failWith is how command name fails: the error on stderr, exit code 1.
func failWith(name string, stderr io.Writer) func(error) int {
	return func(err error) int {
		fmt.Fprintf(stderr, "mocker %s: %v\n", name, err)
		return 1
	}
}

// openTrace opens --trace for one run.
func (f *traceFlags) openTrace() (*replay.Reader, func() error, error) {
	file, err := os.Open(f.trace)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %w", err)
	}
	tr, err := replay.NewReader(file)
	if err != nil {
		_ = file.Close()
		return nil, nil, fmt.Errorf("--trace %s: %w", f.trace, err)
	}
	return tr, func() error { _ = tr.Close(); return file.Close() }, nil
}

func replayCmd(args []string, stdout, stderr io.Writer, stderrTTY bool) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	f := addTraceFlags(fs)
	jsonPath := fs.String("json", "", "")
	reportPath := fs.String("report", "", "")
	if code, ok := parseCommand("replay", replayUsage, fs, f, args, stdout, stderr); !ok {
		return code
	}
	fail := failWith("replay", stderr)
	_, cfg, opts, err := f.load()
	if err != nil {
		return fail(err)
	}
	tr, closeTrace, err := f.openTrace()
	if err != nil {
		return fail(err)
	}
	defer func() { _ = closeTrace() }()
	if stderrTTY {
		opts.Progress = progressLine(stderr)
	}
	out, err := replay.Run(cfg, tr, opts)
	if stderrTTY {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", f.trace, err))
	}
	if err := out.Summary.WriteTable(stdout); err != nil {
		return fail(err)
	}
	if *jsonPath != "" {
		if err := writeOut("--json", *jsonPath, stdout, out.Summary.WriteJSON); err != nil {
			return fail(err)
		}
	}
	if *reportPath != "" {
		r := replayReport(filepath.Base(f.trace), cfg, out)
		if err := report.WriteFile(*reportPath, r); err != nil {
			return fail(fmt.Errorf("--report: %w", err))
		}
	}
	return 0
}

// writeOut renders an output with write and puts it in the file at path,
// or on stdout when path is "-"; errors name the flag.
func writeOut(flagName, path string, stdout io.Writer, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	var err error
	if path == "-" {
		_, err = stdout.Write(b.Bytes())
	} else {
		err = os.WriteFile(path, b.Bytes(), 0o644)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	return nil
}

// readConfigMap reads a cluster config file, JSON or YAML, as the JSON
// object mocker.cluster({...}) takes.
func readConfigMap(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw) // JSON is YAML: both come out as JSON
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("--config %s: want a JSON or YAML object: %w", path, err)
	}
	if m == nil {
		return nil, fmt.Errorf("--config %s: want a JSON or YAML object, got null", path)
	}
	return m, nil
}

// clusterConfig reads m through the parser scripts' mocker.cluster({...})
// objects go through, refusing a transport: a replay runs in process.
func clusterConfig(path string, m map[string]any) (cluster.Config, error) {
	cfg, err := cluster.ConfigFromMap(m)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("--config %s: %w", path, err)
	}
	if cfg.Transport != nil {
		return cluster.Config{}, fmt.Errorf("--config %s: transport: replay runs the cluster in process; remove it", path)
	}
	return cfg, nil
}

// progressLine draws requests ended, modeled time and the rate on one
// terminal line, at most every 200 ms of wall time.
func progressLine(w io.Writer) func(uint64, float64) {
	start := time.Now()
	var last time.Time
	return func(ended uint64, nowMs float64) {
		now := time.Now()
		if now.Sub(last) < 200*time.Millisecond {
			return
		}
		last = now
		rate := float64(ended) / now.Sub(start).Seconds()
		fmt.Fprintf(w, "\r\033[Kreplay: %d requests ended · modeled %.1f s · %.0f req/s", ended, nowMs/1000, rate)
	}
}

// replayReport is the run as the report package draws a cluster.
func replayReport(title string, cfg cluster.Config, out replay.Output) report.Report {
	st := out.Run.Stats
	engine, router := cfg.Engine, cfg.Router
	if engine == "" {
		engine = "vllm"
	}
	if router == "" {
		router = "round-robin"
	}
	c := report.Cluster{Name: "replay", Engine: engine, Router: router, Topology: replayTopology(cfg),
		SpeedupRatio: out.Plan.Scale().Ratio(), Stats: st, Series: out.Run.Series, Holds: out.Run.Holds,
		TTFT: report.Quantiles("completed", &out.Figures.TTFT)}
	outcomes := make([]string, 0, len(out.Figures.Holds))
	for o := range out.Figures.Holds {
		outcomes = append(outcomes, o)
	}
	sort.Strings(outcomes)
	for _, o := range outcomes {
		c.HoldDurations = append(c.HoldDurations, report.Quantiles(o, out.Figures.Holds[o]))
	}
	for _, w := range st.Workers {
		c.Routed = append(c.Routed, report.Routed{Worker: w.Name, Role: w.Role,
			Requests: out.Figures.Routed[[2]string{w.Name, fmt.Sprint(w.DPRank)}]})
	}
	return report.Report{Title: "mocker replay " + title, Clusters: []report.Cluster{c}}
}

func replayTopology(cfg cluster.Config) string {
	if !cfg.Disagg {
		n := cfg.Workers
		if n == 0 {
			n = 2 // the config's default
		}
		return fmt.Sprintf("%d aggregated", n)
	}
	return fmt.Sprintf("%d prefill + %d decode", max(cfg.Prefill.Workers, 1), max(cfg.Decode.Workers, 1))
}
