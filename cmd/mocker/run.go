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

const runUsage = `Usage: mocker run [flags] script.js

Runs a k6-style ES module script. Flags go before the script path.

Flags:
  -u, --vus N                   number of VUs (overrides options.vus)
  -d, --duration D              test duration, e.g. 30s (replaces the script's scenarios)
  -i, --iterations N            total iterations (replaces the script's scenarios)
  -e, --env KEY=VALUE           variable for __ENV (repeatable)
      --include-system-env-vars also put the process environment in __ENV
  -o, --out json=FILE           write every sample to FILE as NDJSON (.gz: gzipped)
      --summary-export FILE     write k6's legacy summary JSON to FILE
      --summary-trend-stats S   comma-separated trend stats, e.g. avg,p(95),p(99)
  -q, --quiet                   no progress display
      --no-color                no ANSI colours
      --no-setup                skip setup()
      --no-teardown             skip teardown()

Exit codes: 0 ok, 99 thresholds crossed, 104 invalid options, 107 script
exception, 108 exec.test.abort(), 110 exec.test.fail(), 2 usage error.
`

// runCmd implements `mocker run`; args are the arguments after "run".
func runCmd(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runWith(ctx, args, os.Stdout, os.Stderr,
		term.IsTerminal(int(os.Stdout.Fd())), term.IsTerminal(int(os.Stderr.Fd())))
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, stdoutTTY, stderrTTY bool) int {
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
	fs.BoolVar(&systemEnvs, "include-system-env-vars", false, "")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mocker run: %v\n\n%s", err, runUsage)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "mocker run: missing the script path\n\n%s", runUsage)
		return exitUsage
	}
	if len(rest) > 1 {
		if strings.HasPrefix(rest[1], "-") {
			fmt.Fprintf(stderr, "mocker run: flag %s comes after the script path; put flags before it: mocker run [flags] %s\n", rest[1], rest[0])
		} else {
			fmt.Fprintf(stderr, "mocker run: one script expected, got %q\n", rest)
		}
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
		Overrides:     harness.Overrides{NoSetup: noSetup, NoTeardown: noTeardown},
	}
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

	err := harness.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "mocker run: %v\n", err)
	}
	return harness.ExitCode(err)
}
