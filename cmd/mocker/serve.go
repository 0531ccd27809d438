package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/serve"
)

// serveUsage is `mocker serve -h`.
const serveUsage = `Usage: mocker serve [--config FILE] [--listen ADDR] [--model NAME] [flags]

Runs a mock cluster behind OpenAI's HTTP API, paced against the wall clock
at its speedup_ratio: POST /v1/completions and /v1/chat/completions
(streamed as server-sent events with "stream": true), GET /v1/models,
/health and /metrics (vLLM's metric names for a vllm cluster, SGLang's for
an sglang one, and mocker's own). Text prompts go through a built-in
deterministic tokenizer, so requests sharing a text prefix share KV blocks.

Flags:
      --config FILE        the cluster config, as mocker.cluster({...}) takes
                           it, in JSON or YAML; default: two aggregated vLLM
                           workers
      --listen ADDR        the address to serve on (default 127.0.0.1:8000)
      --model NAME         the model name served (default mocker)
      --echo               answer with the prompt's words instead of filler
      --seed N             the filler words' seed (default 0)
      --max-body BYTES     the largest request body taken (default 4194304)
      --max-conns N        connections served at once; more wait until one
                           closes (default 4096)
      --drain-timeout D    on SIGTERM/SIGINT, how long to let requests in
                           flight finish (default 30s)
      --log-level L        debug, info (default), warn or error; logs go to stderr
      --failure-injection-rate PCT
                           answer PCT% of requests (0-100, default 0) with an
                           injected error, for testing a client's retries; a
                           request can ask for one with the header
                           X-Mocker-Fail: TYPE
      --failure-types LIST the injected errors, comma-separated (default all):
                           rate_limit (429), invalid_api_key (401),
                           context_length (400), server_error (500),
                           invalid_request (400), model_not_found (404)
      --worker-ports BASE  also serve each worker rank on its own port, BASE +
                           its index (the cluster's workers in config order,
                           each worker's dp ranks in order; logged at start):
                           the OpenAI API answered by that rank alone, and its
                           own /metrics, for a router that picks workers
                           itself; P/D over HTTP with vLLM's kv_transfer_params
                           (default 0: off)
      --kv-events ENDPOINT publish every worker rank's KV events over ZMQ as
                           vLLM does (e.g. tcp://127.0.0.1:5557; tcp://*:5557
                           for every interface): the i-th worker rank, in the
                           order of the cluster's workers, binds a PUB socket
                           on the port + i; the ports are printed at start
      --kv-events-replay ENDPOINT
                           the first replay (ROUTER) socket; rank i binds its
                           port + i (default: the port after the last
                           publisher's)
      --kv-events-topic T  the topic frame of every message (default "")
  -h, --help               print this help

Exit codes: 0 after a clean shutdown, 1 when it cannot start, 2 for bad flags.
`

func serveCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var configPath, listen, level string
	var opts serve.Options
	var drain time.Duration
	var maxConns int
	fs.StringVar(&configPath, "config", "", "")
	fs.StringVar(&listen, "listen", serve.DefaultListen, "")
	fs.StringVar(&opts.Model, "model", serve.DefaultModel, "")
	fs.BoolVar(&opts.Echo, "echo", false, "")
	fs.Uint64Var(&opts.Seed, "seed", 0, "")
	fs.Int64Var(&opts.MaxBodyBytes, "max-body", serve.DefaultMaxBodyBytes, "")
	fs.IntVar(&maxConns, "max-conns", serve.DefaultMaxConns, "")
	fs.DurationVar(&drain, "drain-timeout", 30*time.Second, "")
	fs.StringVar(&level, "log-level", "info", "")
	var failTypes string
	fs.Float64Var(&opts.FailureInjectionRate, "failure-injection-rate", 0, "")
	fs.StringVar(&failTypes, "failure-types", "", "")
	var workerBase int
	fs.IntVar(&workerBase, "worker-ports", 0, "")
	fs.StringVar(&opts.KVEvents.Endpoint, "kv-events", "", "")
	fs.StringVar(&opts.KVEvents.ReplayEndpoint, "kv-events-replay", "", "")
	fs.StringVar(&opts.KVEvents.Topic, "kv-events-topic", "", "")
	if code, done := parseFlags(fs, args, serveUsage, stderr); done {
		return code
	}
	if r := opts.FailureInjectionRate; r < 0 || r > 100 || r != r {
		fmt.Fprintf(stderr, "mocker serve: --failure-injection-rate: want a percentage in [0, 100], got %v\n", r)
		return exitUsage
	}
	kinds, err := serve.ParseFailureTypes(failTypes)
	if err != nil {
		fmt.Fprintf(stderr, "mocker serve: --failure-types: %v\n", err)
		return exitUsage
	}
	opts.FailureTypes = kinds
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintf(stderr, "mocker serve: --log-level: want debug, info, warn or error, got %q\n", level)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	var cfg cluster.Config
	if configPath != "" {
		// The file is read as mocker replay reads its --config, and the
		// object goes through the parser a script's mocker.cluster({...})
		// does.
		m, err := readConfigMap(configPath)
		if err == nil {
			cfg, err = cluster.ConfigFromMap(m)
			if err != nil {
				err = fmt.Errorf("--config %s: %w", configPath, err)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "mocker serve: %v\n", err)
			return 1
		}
	}
	opts.Logger = log
	srv, err := serve.New(cfg, opts)
	if err != nil {
		fmt.Fprintf(stderr, "mocker serve: %v\n", err)
		return 1
	}
	defer srv.Close()
	ln, err := serve.Listen(listen, maxConns)
	if err != nil {
		fmt.Fprintf(stderr, "mocker serve: --listen %s --max-conns %d: %v\n", listen, maxConns, err)
		return 1
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1+len(srv.Workers()))
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "model", opts.Model, "engine", srv.Cluster().Config().Engine,
		"max_model_len", srv.Cluster().MaxModelLen(), "version", readBuildInfo().Line())
	var workers *workerPorts
	if workerBase != 0 {
		if workers, err = startWorkerPorts(srv, listen, workerBase, maxConns, log, errc); err != nil {
			fmt.Fprintf(stderr, "mocker serve: %v\n", err)
			_ = hs.Close()
			return 1
		}
	}
	for _, p := range srv.KVEventPublishers() {
		log.Info("kv events", "worker", p.Worker, "dp_rank", p.DPRank, "pub", p.Endpoint, "replay", p.ReplayEndpoint, "topic", opts.KVEvents.Topic)
	}
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "mocker serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("draining", "timeout", drain)
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if _, err := srv.Drain(dctx); err != nil {
		log.Warn("drain", "err", err)
	}
	if err := hs.Shutdown(dctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	workers.shutdown(dctx)
	return 0
}

// parseFlags parses the flags of the command fs names; done says the
// command ends now, with code: 0 after printing usage for -h, exitUsage
// after saying what was wrong with the flags or a stray argument.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, usage)
			return 0, true
		}
		fmt.Fprintf(stderr, "mocker %s: %v\n\n%s", fs.Name(), err, usage)
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mocker %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, true
	}
	return 0, false
}
