package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/distributed/worker"
	"github.com/kvstrand/mocker/engine"
)

// workerUsage is `mocker worker -h`.
const workerUsage = `Usage: mocker worker --role prefill|decode|aggregated --etcd URL[,URL] --nats URL [flags]

Runs one mock worker in this process (or --count of them, each a worker
of its own): it registers in etcd under a 10 s lease (instance id = lease
id; Dynamo's v1/instances and v1/mdc keys plus mocker's
v1/mocker/{ns}/{id}; a lost lease ends the requests it carried and the
worker registers again under a new one), takes requests over NATS and
streams its outputs back, and a prefill worker serves KV transfers on its
advertised host. A script attaches to such workers with
mocker.cluster({..., transport: {etcd: [...], nats: '...', namespace: '...'}}).

Flags:
      --role R             prefill, decode or aggregated (required)
      --engine E           vllm (default), sglang or trtllm
      --namespace NS       scope of keys and subjects (default mocker)
      --etcd URLS          etcd endpoints, comma-separated (required)
      --nats URL           NATS server (required)
      --args JSON|@FILE    engine arguments (Dynamo's MockEngineArgs keys) over
                           mocker.cluster()'s defaults: block_size 16,
                           num_gpu_blocks 1024, speedup_ratio 10
      --name NAME          the worker's name in results (default ROLE-HOST-PID)
      --count N            run N workers in this process, 1 to 1024 (default
                           1); each is a worker of its own: its own lease,
                           instance id, subjects and transfer server
      --name-prefix P      name the workers P-0 … P-(N-1) (required with
                           --count above 1, unless --name gives the prefix);
                           worker i takes seed --seed+i
      --listen-host H      the transfer server binds H (default 127.0.0.1)
      --advertise-host H   the host decode workers dial (required when
                           --listen-host is 0.0.0.0 or ::)
      --max-rooms N        transfer rooms a prefill worker keeps open at once;
                           a handoff past it fails its request (default 4096)
      --seed N             output-token seed (default 0)
      --no-event-plane     publish no KV events or load on Dynamo's event plane
                           (namespace.NS.…): for a NATS no Dynamo tool reads;
                           mocker's router takes them from the worker's frames
      --drain-timeout D    on SIGTERM/SIGINT, how long to let work in flight
                           finish before leaving (default 30s); with --count
                           every worker drains, and the process exits when
                           all have left
      --log-level L        debug, info (default), warn or error; logs go to stderr
  -h, --help               print this help

Credentials (secrets come from the environment, never from flags, which
every user of the host sees in ps):
      --nats-user U        NATS user; the password is $MOCKER_NATS_PASSWORD
                           (a token instead: $MOCKER_NATS_TOKEN)
      --nats-creds FILE    NATS credentials file (JWT and NKey seed)
      --nats-nkey FILE     NATS NKey seed file
      --nats-ca FILE       CA of the NATS server's certificate (TLS)
      --nats-cert FILE     client certificate for NATS (with --nats-key)
      --nats-key FILE      its key
      --etcd-user U        etcd user; the password is $MOCKER_ETCD_PASSWORD
      --etcd-ca FILE       CA of etcd's certificate (TLS)
      --etcd-cert FILE     client certificate for etcd (with --etcd-key)
      --etcd-key FILE      its key
$MOCKER_NATS_USER and $MOCKER_ETCD_USERNAME stand in for the user flags.

Exit codes: 0 after a clean shutdown, 1 when it cannot start (with
--count, one worker that cannot start stops the others, and the message
names it), 2 for flags
that make no sense (an unknown or repeated flag, a bad role, engine
arguments or URL).
`

func workerCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg worker.Config
	var etcd, argsFlag, level string
	var role onceFlag
	fs.Var(&role, "role", "")
	fs.StringVar(&cfg.Engine, "engine", "vllm", "")
	fs.StringVar(&cfg.Namespace, "namespace", "", "")
	fs.StringVar(&etcd, "etcd", "", "")
	fs.StringVar(&cfg.NATS, "nats", "", "")
	fs.StringVar(&argsFlag, "args", "", "")
	fs.StringVar(&cfg.Name, "name", "", "")
	var count int
	var prefix string
	fs.IntVar(&count, "count", 1, "")
	fs.StringVar(&prefix, "name-prefix", "", "")
	fs.StringVar(&cfg.ListenHost, "listen-host", "127.0.0.1", "")
	fs.StringVar(&cfg.AdvertiseHost, "advertise-host", "", "")
	fs.IntVar(&cfg.MaxRooms, "max-rooms", 0, "")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "")
	fs.BoolVar(&cfg.NoEventPlane, "no-event-plane", false, "")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "")
	fs.StringVar(&level, "log-level", "info", "")
	fs.StringVar(&cfg.NATSAuth.User, "nats-user", "", "")
	fs.StringVar(&cfg.NATSAuth.Creds, "nats-creds", "", "")
	fs.StringVar(&cfg.NATSAuth.NKey, "nats-nkey", "", "")
	fs.StringVar(&cfg.NATSAuth.TLS.CA, "nats-ca", "", "")
	fs.StringVar(&cfg.NATSAuth.TLS.Cert, "nats-cert", "", "")
	fs.StringVar(&cfg.NATSAuth.TLS.Key, "nats-key", "", "")
	fs.StringVar(&cfg.EtcdAuth.Username, "etcd-user", "", "")
	fs.StringVar(&cfg.EtcdAuth.TLS.CA, "etcd-ca", "", "")
	fs.StringVar(&cfg.EtcdAuth.TLS.Cert, "etcd-cert", "", "")
	fs.StringVar(&cfg.EtcdAuth.TLS.Key, "etcd-key", "", "")
	if code, done := parseFlags(fs, args, workerUsage, stderr); done {
		return code
	}
	if role.v == "" || etcd == "" || cfg.NATS == "" {
		fmt.Fprintf(stderr, "mocker worker: --role, --etcd and --nats are required\n\n%s", workerUsage)
		return exitUsage
	}
	if cfg.MaxRooms < 0 {
		fmt.Fprintf(stderr, "mocker worker: --max-rooms %d: want 0 (the default) or more\n", cfg.MaxRooms)
		return exitUsage
	}
	if cfg.DrainTimeout < 0 {
		fmt.Fprintf(stderr, "mocker worker: --drain-timeout %s: want 0 or more\n", cfg.DrainTimeout)
		return exitUsage
	}
	if count < 1 || count > worker.MaxFleet {
		// (0 would mean 1 to the package; on the command line it is a slip.)
		fmt.Fprintf(stderr, "mocker worker: --count %d: want 1 to %d\n", count, worker.MaxFleet)
		return exitUsage
	}
	fleet := worker.Fleet{Count: count, NamePrefix: prefix}
	fleet.Config.Name = cfg.Name
	if _, err := fleet.Names(); err != nil {
		fmt.Fprintf(stderr, "mocker worker: %v\n", err)
		return exitUsage
	}
	// The passwords are the environment's (auth.go): read them here, so
	// the config's checks see a user with its password.
	if cfg.NATSAuth.User != "" {
		cfg.NATSAuth.Password = cluster.Secret(os.Getenv(cluster.EnvNATSPassword))
	}
	if cfg.EtcdAuth.Username != "" {
		cfg.EtcdAuth.Password = cluster.Secret(os.Getenv(cluster.EnvEtcdPassword))
	}
	cfg.Role = engine.WorkerType(role.v)
	cfg.Etcd = strings.Split(etcd, ",")
	if strings.HasPrefix(argsFlag, "@") {
		data, err := readArgsFile(argsFlag[1:])
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
	// Which build a worker runs belongs in its log: a fleet may mix them.
	cfg.Logger.Info("mocker worker", "version", readBuildInfo().Line(), "count", count)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fleet.Config = cfg
	if err := worker.RunFleet(ctx, fleet); err != nil {
		fmt.Fprintf(stderr, "mocker worker: %v\n", err)
		if worker.IsUsage(err) {
			return exitUsage
		}
		return 1
	}
	return 0
}

// maxArgsFile bounds what --args @FILE reads: engine arguments, even with
// a planner profile, are far smaller, and /dev/zero is endless.
const maxArgsFile = 16 << 20

func readArgsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxArgsFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxArgsFile {
		return nil, fmt.Errorf("%s: larger than %d MiB; engine arguments are a small JSON object", path, maxArgsFile>>20)
	}
	return data, nil
}

// onceFlag is a string flag that may be given once: a second --role is a
// mistake, not a change of mind.
type onceFlag struct {
	v   string
	set bool
}

func (f *onceFlag) String() string { return f.v }

func (f *onceFlag) Set(s string) error {
	if f.set {
		return fmt.Errorf("given twice (%q, then %q); give it once", f.v, s)
	}
	f.v, f.set = s, true
	return nil
}
