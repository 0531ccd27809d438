// Command mocker reproduces the failure modes of disaggregated LLM serving —
// prefill KV stranded while decode is saturated, the cascade that follows and
// the abort timeouts that end it — on mock workers, without GPUs.
//
// Usage:
//
//	mocker run [flags] script.js   run a k6-style load script (see `mocker run -h`)
//	mocker worker [flags]          run one distributed worker (see `mocker worker -h`)
//	mocker replay [flags]          replay a request trace on virtual time (see `mocker replay -h`)
//	mocker sweep [flags]           replay a trace over a grid of configs (see `mocker sweep -h`)
//	mocker serve [flags]           serve a mock cluster over OpenAI's HTTP API (see `mocker serve -h`)
//	mocker args [KEY...]           print the engine arguments (see `mocker args -h`)
//	mocker metrics [NAME...]       print the metrics of k6/x/mocker
//	mocker version                 print the version, revision and Go version
//	mocker help                    print the usage
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"golang.org/x/term"

	"github.com/kvstrand/mocker/distributed"
)

func main() {
	if os.Getenv("GOGC") == "" {
		// A run allocates steadily but keeps little (a quickstart run's
		// live heap stays near 4 MB, an hour of it too): a heap goal of
		// five times the live heap rather than twice collects a quarter as
		// often, which BenchmarkVirtualAggregated puts at about a tenth
		// of a request's CPU. GOGC set in the environment says otherwise.
		debug.SetGCPercent(400)
	}
	os.Exit(profiled(os.Args[1:], func() int { return dispatch(os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs a command, writing a CPU profile of it to the file the
// environment variable MOCKER_CPUPROFILE names (profilePath).
func profiled(args []string, cmd func() int) int {
	path := profilePath(args, os.Getenv("MOCKER_CPUPROFILE"), os.Getpid())
	if path == "" {
		return cmd()
	}
	stop, err := startCPUProfile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "MOCKER_CPUPROFILE: %v\n", err)
		return 2
	}
	defer stop()
	return cmd()
}

// profilePath is where command args writes its CPU profile given
// MOCKER_CPUPROFILE=path, or "" for none. The commands that run in one
// process write to path; `mocker worker` to path.worker-PID, since the
// workers of a distributed run (local mode's, a benchmark's) inherit the
// environment of the process that started them and would otherwise
// write over its file and each other's.
func profilePath(args []string, path string, pid int) string {
	if path == "" || len(args) == 0 {
		return ""
	}
	switch args[0] {
	case "run", "replay", "sweep", "serve":
		return path
	case "worker":
		return fmt.Sprintf("%s.worker-%d", path, pid)
	}
	return ""
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:])
	case "worker":
		return workerCmd(args[1:], stderr)
	case "sweep":
		return sweepCmd(args[1:], stdout, stderr)
	case "replay":
		return replayCmd(args[1:], stdout, stderr, stderr == io.Writer(os.Stderr) && term.IsTerminal(int(os.Stderr.Fd())))
	case "serve":
		return serveCmd(args[1:], stderr)
	case "args", "metrics":
		return docsCmd(args[0], args[1:], stdout, stderr)
	case distributed.ReaperCommand: // local mode's, not for users
		return distributed.RunReaper(args[1:], os.Stdin)
	case "version", "--version", "-v":
		fmt.Fprint(stdout, readBuildInfo().Text())
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 {
			if u, ok := commandUsage[args[1]]; ok {
				fmt.Fprint(stdout, u)
				return 0
			}
		}
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "mocker: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `mocker: mock disaggregated LLM serving — KV stranding, transfers and aborts, without GPUs

Usage:
  mocker run [flags] script.js   run a k6-style load script against mock workers
  mocker worker --role R ...     run one worker for a distributed cluster (etcd + NATS)
  mocker replay --trace F ...    replay a request trace on virtual time: aiperf-style figures
  mocker sweep --grid G ...      replay a trace over a grid of configs: CSV, Pareto front
  mocker serve [--config FILE]   serve a mock cluster over OpenAI's HTTP API, with vLLM metrics
  mocker args [KEY...]           print the engine arguments: type, default, meaning, in Dynamo?
  mocker metrics [NAME...]       print the metrics of k6/x/mocker: type, tags, meaning
  mocker version                 print the version, git revision and Go version
  mocker help                    print this help

Run 'mocker COMMAND -h' for a command's flags; 'mocker run -h' also lists the exit codes.
`)
}

// commandUsage is each command's help, for 'mocker help COMMAND'.
var commandUsage = map[string]string{"run": runUsage, "replay": replayUsage, "sweep": sweepUsage, "worker": workerUsage, "serve": serveUsage, "args": argsUsage, "metrics": metricsUsage}
