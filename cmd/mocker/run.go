package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/kvstrand/mocker/harness"
	"github.com/kvstrand/mocker/xk6mocker"
)

// exitUsage is returned for command-line mistakes (unknown flag, missing
// script), as the flag package does.
const exitUsage = 2

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runUsage is `mocker run -h`. TestRunUsage_NamesEveryFlag keeps it in
// step with the flags runFlags defines.
const runUsage = `Usage: mocker run [flags] script.js [flags]

Runs a k6-style ES module script against mock workers. Flags may come
before or after the script path; "--" ends the flags.

Flags:
  -u, --vus N                   number of VUs (overrides options.vus)
  -d, --duration D              test duration, e.g. 30s (replaces the script's scenarios)
  -i, --iterations N            total iterations (replaces the script's scenarios)
  -e, --env KEY=VALUE           variable for __ENV, over the process
                                environment (repeatable)
      --include-system-env-vars=false
                                leave the process environment out of __ENV
  -o, --out json=FILE           write every sample to FILE as NDJSON (.gz: gzipped)
      --summary-export FILE     write k6's legacy summary JSON to FILE
      --summary-trend-stats S   comma-separated trend stats, e.g. avg,p(95),p(99)
      --report FILE             write an HTML report of the run to FILE: each
                                cluster's history and the thresholds (self-contained)
      --clock auto|paced|virtual|wall
                                what time the script runs on (or MOCKER_CLOCK):
                                paced and virtual give the same results on any
                                host, however busy; virtual runs as fast as the
                                CPU allows, paced at the wall clock's pace; wall
                                lets every VU run freely on the host's clock, as
                                k6 does, results then vary with the host (the
                                distributed transport needs paced or wall);
                                auto (default) is paced for a script that
                                imports k6/x/mocker, wall for any other
      --virtual-epoch T         where a paced or virtual clock starts
                                (Date.now() at the start), RFC 3339; default
                                the start of the run when paced,
                                2026-01-01T00:00:00Z when virtual
      --random-seed N           seed Math.random in every VU (overrides
                                options.randomSeed; 0 by default on a paced
                                or virtual clock)
      --execution-segment S     run only this share of the test, e.g. 1/3:2/3
                                (options.executionSegment): its part of every
                                scenario's VUs, iterations and arrival-rate
                                starts, so that several processes split one test
      --execution-segment-sequence Q
                                the segments all processes use, e.g.
                                0,1/3,2/3,1 (options.executionSegmentSequence)
  -q, --quiet                   no start banner and no progress display
      --no-color                no ANSI colours in the summary
      --no-setup                skip setup()
      --no-teardown             skip teardown()
  -h, --help                    print this help

SIGINT or SIGTERM stops the scenarios, then teardown and the summary run
and the exit code is 105; a second signal exits at once.

Exit codes:
  0    the test ran and every threshold passed
  2    usage error: unknown flag, missing or extra script path
  99   thresholds were crossed
  100  setup() did not finish within setupTimeout
  101  teardown() did not finish within teardownTimeout
  104  invalid options, thresholds, flag value or output path
  105  interrupted by SIGINT or SIGTERM
  107  the script threw in init, setup or teardown
  108  the script called exec.test.abort()
  110  the script called exec.test.fail()
`

// usageHint ends every usage error: short, pointing at the full help.
const usageHint = "Usage: mocker run [flags] script.js\nRun 'mocker run -h' for the flags and exit codes.\n"

// runCmd implements `mocker run`; args are the arguments after "run".
func runCmd(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go handleSignals(sigs, done, cancel, os.Stderr)

	stderrTTY := term.IsTerminal(int(os.Stderr.Fd()))
	width := 0
	if stderrTTY {
		if w, _, err := term.GetSize(int(os.Stderr.Fd())); err == nil {
			width = w
		}
	}
	oneProcOnTurns = true
	return runWith(ctx, args, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stdout.Fd())), stderrTTY, width)
}

// oneProcOnTurns is set in the mocker process (not in tests that call
// runWith): a run on a paced or virtual clock then uses one P (see
// runWith) unless GOMAXPROCS says otherwise.
var oneProcOnTurns bool

// handleSignals turns the first SIGINT/SIGTERM into a cancellation of the
// run, which stops the scenarios and still runs teardown and the summary
// (exit 105), as k6 does. A second signal exits at once, for a teardown or
// handleSummary that does not end.
func handleSignals(sigs <-chan os.Signal, done <-chan struct{}, cancel context.CancelCauseFunc, stderr io.Writer) {
	select {
	case sig := <-sigs:
		cancel(fmt.Errorf("test run was aborted because mocker received a '%s' signal", sig))
	case <-done:
		return
	}
	select {
	case sig := <-sigs:
		fmt.Fprintf(stderr, "mocker run: received a second '%s' signal; exiting at once\n", sig)
		os.Exit(harness.ExitExternalAbort)
	case <-done:
	}
}

// parseInterspersed parses flags wherever they appear among the positional
// arguments (`mocker run script.js -u 5`), as k6's command line does; "--"
// ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// runFlags holds the values of the `mocker run` flags.
type runFlags struct {
	vus, iterations                                 int64
	duration, summaryExport, trendStats, report     string
	clock, epoch                                    string
	segment, segmentSequence                        string
	seed                                            int64
	env, outs                                       listFlag
	quiet, noColor, noSetup, noTeardown, systemEnvs bool
}

// newRunFlags defines the `mocker run` flags, each under its k6 names
// (short and long).
func newRunFlags() (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by runWith
	f := &runFlags{}
	for _, name := range []string{"u", "vus"} {
		fs.Int64Var(&f.vus, name, 0, "")
	}
	for _, name := range []string{"i", "iterations"} {
		fs.Int64Var(&f.iterations, name, 0, "")
	}
	for _, name := range []string{"d", "duration"} {
		fs.StringVar(&f.duration, name, "", "")
	}
	for _, name := range []string{"e", "env"} {
		fs.Var(&f.env, name, "")
	}
	for _, name := range []string{"o", "out"} {
		fs.Var(&f.outs, name, "")
	}
	for _, name := range []string{"q", "quiet"} {
		fs.BoolVar(&f.quiet, name, false, "")
	}
	fs.StringVar(&f.summaryExport, "summary-export", "", "")
	fs.StringVar(&f.trendStats, "summary-trend-stats", "", "")
	fs.StringVar(&f.report, "report", "", "")
	fs.StringVar(&f.clock, "clock", "", "")
	fs.StringVar(&f.epoch, "virtual-epoch", "", "")
	fs.StringVar(&f.segment, "execution-segment", "", "")
	fs.StringVar(&f.segmentSequence, "execution-segment-sequence", "", "")
	fs.Int64Var(&f.seed, "random-seed", 0, "")
	fs.BoolVar(&f.noColor, "no-color", false, "")
	fs.BoolVar(&f.noSetup, "no-setup", false, "")
	fs.BoolVar(&f.noTeardown, "no-teardown", false, "")
	fs.BoolVar(&f.systemEnvs, "include-system-env-vars", true, "")
	return fs, f
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, stdoutTTY, stderrTTY bool, termWidth int) int {
	fs, f := newRunFlags()
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mocker run: %v\n%s", err, usageHint)
		return exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "mocker run: missing the script path (the k6-style .js file to run)\n%s", usageHint)
		return exitUsage
	}
	if len(rest) > 1 {
		fmt.Fprintf(stderr, "mocker run: one script expected, got %d: %q\n%s", len(rest), rest, usageHint)
		return exitUsage
	}

	cfg := harness.Config{
		Script:        rest[0],
		Version:       "mocker " + readBuildInfo().Line(),
		Env:           map[string]string{},
		Outputs:       f.outs,
		SummaryExport: f.summaryExport,
		Quiet:         f.quiet,
		NoColor:       f.noColor, // the harness also leaves a non-terminal stdout plain
		Stdout:        stdout,
		Stderr:        stderr,
		StdoutTTY:     stdoutTTY,
		StderrTTY:     stderrTTY,
		TermWidth:     termWidth,
		Overrides:     harness.Overrides{NoSetup: f.noSetup, NoTeardown: f.noTeardown},

		ExecutionSegment:         f.segment,
		ExecutionSegmentSequence: f.segmentSequence,
	}
	// As in `k6 run`, __ENV starts from the process environment; -e wins.
	if f.systemEnvs {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				cfg.Env[k] = v
			}
		}
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "mocker run: --env %q: want KEY=VALUE\n", kv)
			return harness.ExitInvalidConfig
		}
		cfg.Env[k] = v
	}
	var badValue error
	clockMode := os.Getenv("MOCKER_CLOCK")
	clockFrom := "MOCKER_CLOCK"
	fs.Visit(func(given *flag.Flag) {
		switch given.Name {
		case "u", "vus":
			v := f.vus
			cfg.Overrides.VUs = &v
		case "i", "iterations":
			v := f.iterations
			cfg.Overrides.Iterations = &v
		case "d", "duration":
			d, err := time.ParseDuration(f.duration)
			if err != nil {
				badValue = fmt.Errorf("--duration: invalid duration %q", f.duration)
				return
			}
			cfg.Overrides.Duration = &d
		case "clock":
			clockMode, clockFrom = f.clock, "--clock"
		case "virtual-epoch":
			t, err := time.Parse(time.RFC3339, f.epoch)
			if err != nil {
				badValue = fmt.Errorf("--virtual-epoch: want an RFC 3339 time such as 2026-01-01T00:00:00Z, got %q", f.epoch)
				return
			}
			cfg.VirtualEpoch = t
		case "random-seed":
			if f.seed < 0 {
				badValue = fmt.Errorf("--random-seed: want an integer ≥ 0, got %d", f.seed)
				return
			}
			v := f.seed
			cfg.Overrides.RandomSeed = &v
		case "summary-trend-stats":
			for _, s := range strings.Split(f.trendStats, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.Overrides.SummaryTrendStats = append(cfg.Overrides.SummaryTrendStats, s)
				}
			}
		}
	})
	switch clockMode {
	case "", "auto":
		cfg.Clock = harness.ClockAuto
	case "paced":
		cfg.Clock = harness.ClockPaced
	case "wall":
		cfg.Clock = harness.ClockWall
	case "virtual":
		cfg.Clock = harness.ClockVirtual
	default:
		if badValue == nil {
			badValue = fmt.Errorf("%s: want auto, paced, virtual or wall, got %q", clockFrom, clockMode)
		}
	}
	if cfg.Clock != harness.ClockWall && oneProcOnTurns && os.Getenv("GOMAXPROCS") == "" {
		// On a paced or virtual clock the run's tasks take turns, one at a
		// time: a second P only has the runtime wake a thread at every turn
		// to find nothing to do. One P runs the same run on a fifth less
		// CPU (and wall) time; other processes (distributed workers) keep
		// their own.
		runtime.GOMAXPROCS(1)
	}
	if !cfg.VirtualEpoch.IsZero() && cfg.Clock == harness.ClockWall && badValue == nil {
		badValue = errors.New("--virtual-epoch: only means something with --clock paced or --clock virtual")
	}
	if badValue != nil {
		fmt.Fprintf(stderr, "mocker run: %v\n", badValue)
		return harness.ExitInvalidConfig
	}

	var rep *reportWriter
	if f.report != "" {
		if err := harness.CheckWritable(f.report); err != nil {
			fmt.Fprintf(stderr, "mocker run: --report %s: the file cannot be written: %v\n", f.report, err)
			return harness.ExitInvalidConfig
		}
		rep = &reportWriter{path: f.report, title: cfg.Script, stderr: stderr}
		ctx = xk6mocker.WithReport(ctx, rep.write)
	}

	err = harness.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "mocker run: %v\n", err)
	}
	if rep != nil {
		rep.done()
	}
	return harness.ExitCode(err)
}
