package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/kvstrand/mocker/harness"
)

// exitUsage is returned for command-line mistakes (unknown flag, missing
// script), as the flag package does.
const exitUsage = 2

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

const runUsage = `Usage: mocker run [flags] script.js [flags]

Runs a k6-style ES module script. Flags may come before or after the
script path.

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
  -q, --quiet                   no progress display
      --no-color                no ANSI colours
      --no-setup                skip setup()
      --no-teardown             skip teardown()

SIGINT or SIGTERM stops the scenarios, then teardown and the summary run
and the exit code is 105; a second signal exits at once.

Exit codes: 0 ok, 99 thresholds crossed, 104 invalid options or output
path, 105 interrupted by a signal, 107 script exception, 108
exec.test.abort(), 110 exec.test.fail(), 2 usage error.
`

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
	return runWith(ctx, args, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stdout.Fd())), stderrTTY, width)
}

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

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, stdoutTTY, stderrTTY bool, termWidth int) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		vus, iterations                                 int64
		duration, summaryExport, trendStats             string
		env, outs                                       listFlag
		quiet, noColor, noSetup, noTeardown, systemEnvs bool
	)
	for _, name := range []string{"u", "vus"} {
		fs.Int64Var(&vus, name, 0, "")
	}
	for _, name := range []string{"i", "iterations"} {
		fs.Int64Var(&iterations, name, 0, "")
	}
	for _, name := range []string{"d", "duration"} {
		fs.StringVar(&duration, name, "", "")
	}
	for _, name := range []string{"e", "env"} {
		fs.Var(&env, name, "")
	}
	for _, name := range []string{"o", "out"} {
		fs.Var(&outs, name, "")
	}
	for _, name := range []string{"q", "quiet"} {
		fs.BoolVar(&quiet, name, false, "")
	}
	fs.StringVar(&summaryExport, "summary-export", "", "")
	fs.StringVar(&trendStats, "summary-trend-stats", "", "")
	fs.BoolVar(&noColor, "no-color", false, "")
	fs.BoolVar(&noSetup, "no-setup", false, "")
	fs.BoolVar(&noTeardown, "no-teardown", false, "")
	fs.BoolVar(&systemEnvs, "include-system-env-vars", true, "")

	rest, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mocker run: %v\n\n%s", err, runUsage)
		return exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "mocker run: missing the script path\n\n%s", runUsage)
		return exitUsage
	}
	if len(rest) > 1 {
		fmt.Fprintf(stderr, "mocker run: one script expected, got %q\n", rest)
		return exitUsage
	}

	cfg := harness.Config{
		Script:        rest[0],
		Env:           map[string]string{},
		Outputs:       outs,
		SummaryExport: summaryExport,
		Quiet:         quiet,
		NoColor:       noColor || !stdoutTTY, // k6 colours only a terminal
		Stdout:        stdout,
		Stderr:        stderr,
		StdoutTTY:     stdoutTTY,
		StderrTTY:     stderrTTY,
		TermWidth:     termWidth,
		Overrides:     harness.Overrides{NoSetup: noSetup, NoTeardown: noTeardown},
	}
	// As in `k6 run`, __ENV starts from the process environment; -e wins.
	if systemEnvs {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				cfg.Env[k] = v
			}
		}
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "mocker run: --env %q: want KEY=VALUE\n", kv)
			return harness.ExitInvalidConfig
		}
		cfg.Env[k] = v
	}
	var badValue error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "u", "vus":
			v := vus
			cfg.Overrides.VUs = &v
		case "i", "iterations":
			v := iterations
			cfg.Overrides.Iterations = &v
		case "d", "duration":
			d, err := time.ParseDuration(duration)
			if err != nil {
				badValue = fmt.Errorf("--duration: invalid duration %q", duration)
				return
			}
			cfg.Overrides.Duration = &d
		case "summary-trend-stats":
			for _, s := range strings.Split(trendStats, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.Overrides.SummaryTrendStats = append(cfg.Overrides.SummaryTrendStats, s)
				}
			}
		}
	})
	if badValue != nil {
		fmt.Fprintf(stderr, "mocker run: %v\n", badValue)
		return harness.ExitInvalidConfig
	}

	err = harness.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "mocker run: %v\n", err)
	}
	return harness.ExitCode(err)
}
