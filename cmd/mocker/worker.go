package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvstrand/mocker/distributed"
	"github.com/kvstrand/mocker/engine"
)

// workerUsage is `mocker worker -h`.
const workerUsage = `Usage: mocker worker --role prefill|decode|aggregated --etcd URL[,URL] --nats URL [flags]

Runs one mock worker in this process: it registers in etcd under a 10 s
lease (instance id = lease id; Dynamo's v1/instances and v1/mdc keys plus
mocker's v1/mocker/{ns}/{id}), takes requests over NATS and streams its
outputs back, and a prefill worker serves KV transfers on its advertised
host. A script attaches to such workers with
mocker.cluster({..., transport: {etcd: [...], nats: '...', namespace: '...'}}).

Flags:
      --role R             prefill, decode or aggregated (required)
      --engine E           vllm (default) or sglang
      --namespace NS       scope of keys and subjects (default mocker)
      --etcd URLS          etcd endpoints, comma-separated (required)
      --nats URL           NATS server (required)
      --args JSON|@FILE    engine arguments (Dynamo's MockEngineArgs keys) over
                           mocker.cluster()'s defaults: block_size 16,
                           num_gpu_blocks 1024, speedup_ratio 10
      --name NAME          the worker's name in results (default ROLE-HOST-PID)
      --listen-host H      the transfer server binds H (default 127.0.0.1)
      --advertise-host H   the host decode workers dial (required when
                           --listen-host is 0.0.0.0 or ::)
      --max-rooms N        transfer rooms a prefill worker keeps open at once;
                           a handoff past it fails its request (default 4096)
      --seed N             output-token seed (default 0)
      --drain-timeout D    on SIGTERM/SIGINT, how long to let work in flight
                           finish before leaving (default 30s)
      --log-level L        debug, info (default), warn or error; logs go to stderr
  -h, --help               print this help

Exit codes: 0 after a clean shutdown, 1 when it cannot start or loses its
lease, 2 for bad flags.
`

func workerCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg distributed.WorkerConfig
	var role, etcd, argsFlag, level string
	fs.StringVar(&role, "role", "", "")
	fs.StringVar(&cfg.Engine, "engine", "vllm", "")
	fs.StringVar(&cfg.Namespace, "namespace", "", "")
	fs.StringVar(&etcd, "etcd", "", "")
	fs.StringVar(&cfg.NATS, "nats", "", "")
	fs.StringVar(&argsFlag, "args", "", "")
	fs.StringVar(&cfg.Name, "name", "", "")
	fs.StringVar(&cfg.ListenHost, "listen-host", "127.0.0.1", "")
	fs.StringVar(&cfg.AdvertiseHost, "advertise-host", "", "")
	fs.IntVar(&cfg.MaxRooms, "max-rooms", 0, "")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "")
	fs.StringVar(&level, "log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, workerUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mocker worker: %v\n\n%s", err, workerUsage)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mocker worker: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if role == "" || etcd == "" || cfg.NATS == "" {
		fmt.Fprintf(stderr, "mocker worker: --role, --etcd and --nats are required\n\n%s", workerUsage)
		return exitUsage
	}
	if cfg.MaxRooms < 0 {
		fmt.Fprintf(stderr, "mocker worker: --max-rooms %d: want 0 (the default) or more\n", cfg.MaxRooms)
		return exitUsage
	}
	cfg.Role = engine.WorkerType(role)
	cfg.Etcd = strings.Split(etcd, ",")
	if strings.HasPrefix(argsFlag, "@") {
		data, err := os.ReadFile(argsFlag[1:])
		if err != nil {
			fmt.Fprintf(stderr, "mocker worker: --args: %v\n", err)
			return exitUsage
		}
		cfg.Args = data
	} else if argsFlag != "" {
		cfg.Args = []byte(argsFlag)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintf(stderr, "mocker worker: --log-level: %v\n", err)
		return exitUsage
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := distributed.RunWorker(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "mocker worker: %v\n", err)
		return 1
	}
	return 0
}
