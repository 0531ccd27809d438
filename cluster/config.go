package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/internal/jsonval"
	"github.com/kvstrand/mocker/internal/timescale"
	"github.com/kvstrand/mocker/router"
)

// Defaults of a cluster built from an empty Config, in one place. The engine
// arguments below replace Dynamo's datacenter-sized defaults (64-token
// blocks, 16384 blocks, real time) with a pool a laptop simulates in a blink;
// any key given in args or a pool's args wins over them.
const (
	DefaultName         = "default"
	DefaultEngine       = "vllm"
	DefaultRouter       = "round-robin"
	DefaultWorkers      = 2 // aggregated pool size
	DefaultPoolWorkers  = 1 // prefill and decode pool sizes
	DefaultMaxTokens    = 16
	DefaultBlockSize    = 16
	DefaultNumGPUBlocks = 1024
	DefaultSpeedupRatio = 10.0
	DefaultTransferHost = "127.0.0.1"
	vocabSize           = 32000
	maxForensicHolds    = 64   // longest holds kept by Holds
	maxRecentHolds      = 256  // most recent ended holds kept by Holds
	maxRecentEvents     = 1024 // forensic events kept by Events
)

// Bounds checked when a config is resolved, before any worker is built, so
// an oversized or degenerate value is a config error naming its field
// rather than an allocation the machine cannot make or a timer that
// overflows.
const (
	// MaxWorkers bounds the workers of one cluster, every pool together,
	// and their data-parallel ranks: workers × dp_size summed over the
	// pools (each rank is a scheduler and a KV pool of its own).
	MaxWorkers = 1024
	// MinSpeedupRatio and MaxSpeedupRatio bound speedup_ratio and
	// decode_speedup_ratio (0 still means no scaling). Below the minimum a
	// modeled millisecond lasts more than a wall second, so timers and
	// timeouts leave any usable range; above the maximum modeled times
	// shrink to nothing in wall time.
	MinSpeedupRatio = 1e-3
	MaxSpeedupRatio = 1e6
	// MaxTimeoutMs bounds kv_transfer_abort_timeout_ms and
	// handoff_session_timeout_ms (modeled ms, about 11.6 days). With
	// MinSpeedupRatio it keeps every wall-time timer within
	// jsonval.MaxMillis.
	MaxTimeoutMs = 1e9
	// BytesPerBlock is the memory one KV block costs a worker, the figure
	// the memory estimate multiplies: a fresh pool measures 60-74 bytes a
	// block (vLLM) and 68-82 (SGLang) from 100k to 1M blocks; the rest is
	// headroom for the prefix cache and the router's view of the blocks.
	BytesPerBlock = 128
	// DefaultMemoryFraction is the share of the machine's memory
	// (/proc/meminfo MemTotal) the KV pools of one cluster may take when
	// max_memory_mb is not given.
	DefaultMemoryFraction = 0.5
	// MaxTransferConns bounds transfer_max_conns: each connection holds a
	// goroutine and a socket.
	MaxTransferConns = 1 << 16
	// fallbackMemoryMB is the limit where /proc/meminfo cannot be read.
	fallbackMemoryMB = 4096
)

// Config describes one cluster: what mocker.cluster({...}) receives in a
// script (docs/design.md §1 and xk6mocker/doc.go). JSON keys are the script's. The zero value is a valid
// config: two aggregated vLLM workers behind a round-robin router, with the
// laptop-sized engine defaults (block_size 16, num_gpu_blocks 1024,
// speedup_ratio 10).
type Config struct {
	// Name names the cluster: a script's clusters are keyed by it (the
	// plugin gives every VU the same one). Default "default".
	Name string `json:"name"`
	// Engine is the scheduler model of every worker: "vllm" (default,
	// source-first handoff), "sglang" (destination-first handoff unless
	// args.sglang.optimistic_prefill) or "trtllm" (the vLLM core under
	// TensorRT-LLM's capacity policy, args.trtllm; source-first).
	Engine string `json:"engine"`
	// Disagg runs separate prefill and decode pools with a KV handoff
	// between them. False runs one aggregated pool of Workers workers.
	// ConfigFromMap sets it when a script gives prefill or decode without
	// saying disagg.
	Disagg bool `json:"disagg"`
	// Router is the routing mode: "round-robin" (default), "random", "kv",
	// "least-loaded" or "power-of-two".
	Router string `json:"router"`
	// Workers sizes the aggregated pool (default 2). Ignored when Disagg.
	Workers int `json:"workers"`
	// Prefill and Decode size and configure the disaggregated pools
	// (default one worker each).
	Prefill PoolConfig `json:"prefill"`
	Decode  PoolConfig `json:"decode"`
	// Args are engine arguments (Dynamo's MockEngineArgs keys) for every
	// worker; a pool's Args override them key by key. engine_type and
	// worker_type are set by the cluster from Engine and the pool.
	Args map[string]any `json:"args"`
	// RouterOptions are the router's settings by their Dynamo keys
	// (overlap_score_weight, router_temperature, use_kv_events,
	// router_ttl_secs, router_max_tree_size, router_request_ttl_secs,
	// active_decode_blocks_threshold, active_prefill_tokens_threshold,
	// active_prefill_tokens_threshold_frac, seed) plus busy_threshold, see
	// RouterOptionsHelp.
	RouterOptions map[string]any `json:"router_options"`
	// Seed drives prompt tokens, output tokens and routing draws.
	Seed uint64 `json:"seed"`
	// MaxMemoryMB bounds the memory the cluster's KV pools may take, as
	// estimated from num_gpu_blocks × workers × BytesPerBlock. Default:
	// DefaultMemoryFraction of the machine's memory. Workers reached
	// through a Transport count only when this process spawns them
	// (Local): otherwise their pools live on their own hosts.
	MaxMemoryMB int `json:"max_memory_mb,omitempty"`
	// TransferHost is the host every prefill worker's transfer server binds
	// (on a free port). Default 127.0.0.1.
	TransferHost string `json:"transfer_host"`
	// AdvertisedHost is the host put into handoff params, what decode
	// workers dial. Default: the bound host. Required when TransferHost
	// binds every interface (0.0.0.0, ::).
	AdvertisedHost string `json:"advertised_host"`
	// TransferMaxConns bounds the decode connections each prefill worker's
	// transfer server serves at once (bootstrap.Config.MaxConns; at the
	// limit the oldest unauthenticated connection is evicted). 0: the
	// server's default, bootstrap.DefaultMaxConns.
	TransferMaxConns int `json:"transfer_max_conns,omitempty"`
	// Transport selects the distributed transport (etcd + NATS); nil runs
	// everything in process.
	Transport *TransportConfig `json:"transport,omitempty"`
	// StreamTokens has every worker report each output token as its pass
	// ends, so a Request's OnToken hears every token rather than the first
	// alone (an HTTP server streaming tokens to its clients needs them).
	// It costs a record per token; modeled results do not change.
	StreamTokens bool `json:"-"`
	// OnKVEvents, when set, hears the KV events of each pass of every
	// in-process worker (KVPass), with the token ids of the blocks stored,
	// on the cluster's loop as the pass's output is delivered: it must
	// return at once and never call the cluster. A router that reads the workers' caches through their
	// views still gets its answers that way; the workers then record
	// their events for this alone. Workers reached through a Transport
	// are not heard.
	OnKVEvents func(KVPass) `json:"-"`
	// Logger receives the forensic log (one record per handoff transition)
	// and diagnostics. Default: discard.
	Logger *slog.Logger `json:"-"`
}

// PoolConfig sizes and configures one disaggregated pool.
type PoolConfig struct {
	// Workers is the pool size; 0 means 1.
	Workers int `json:"workers"`
	// Args override the cluster's Args for this pool's workers.
	Args map[string]any `json:"args"`
}

// TransportConfig locates the services of the distributed transport.
type TransportConfig struct {
	// Etcd are the etcd endpoints workers register in.
	Etcd []string `json:"etcd"`
	// NATS is the NATS server URL requests and events travel through.
	NATS string `json:"nats"`
	// NATSAuth and EtcdAuth are the credentials and TLS files the router
	// presents (the script's nats: {url, user, ...} and etcd: {endpoints,
	// username, ...}; transport_auth.go).
	NATSAuth NATSAuth `json:"nats_auth,omitzero"`
	EtcdAuth EtcdAuth `json:"etcd_auth,omitzero"`
	// Namespace scopes the workers this cluster uses (default
	// DefaultNamespace).
	Namespace string `json:"namespace"`
	// Local starts an embedded etcd and NATS and spawns the pools as
	// `mocker worker` child processes (the script's `transport: 'local'`).
	Local bool `json:"local,omitempty"`
	// Coupled has the cluster's loop drive the workers' clocks: each
	// worker's time moves only as far as the loop lets it, and modeled
	// time passes nothing a worker has yet to answer, so the wall time a
	// message takes between processes never becomes modeled time and the
	// results depend on the config, seed and arrivals alone, on any host.
	// The workers must serve this cluster alone (a worker with another
	// router's work refuses). RunVirtual needs it with a transport.
	Coupled bool `json:"coupled,omitempty"`
}

// RouterOptionsHelp explains the busy thresholds a script sets in
// router_options, which is how the cascade shows up as refusals:
//
//	router_options: { busy_threshold: 0.9 }
//
// marks a worker busy while its capacity view (every allocated block, held
// KV included) exceeds 90% of its pool; when every prefill worker is busy a
// request ends "rejected" with PrefillRejected and "all prefill workers busy".
// Dynamo's active_decode_blocks_threshold applies the same fraction to the
// router-facing view instead, which leaves held blocks out unless the
// engine args say router_load_includes_held; the two are exclusive.
// active_prefill_tokens_threshold marks a worker busy while the prompt
// tokens routed to it and not yet prefilled exceed the number given.
// Thresholds apply to every role (prefill, decode, aggregated) alike; the
// router's own prediction of active blocks also counts, so a decode pool
// sized close to its load goes busy before its prefill pool does.
const RouterOptionsHelp = "router_options: busy_threshold (fraction of blocks, held included), active_decode_blocks_threshold (fraction, router-facing view), active_prefill_tokens_threshold (tokens)"

// configKeys are the keys ConfigFromMap accepts, for its error messages.
var configKeys = []string{"advertised_host", "args", "decode", "disagg", "engine", "max_memory_mb", "name", "prefill", "router", "router_options", "seed", "transfer_host", "transfer_max_conns", "transport", "workers"}

// ConfigFromMap reads a Config from a decoded JSON object or an object
// exported from a script runtime: numbers may be any Go integer, an integral
// float64 or json.Number; nested objects are map[string]any. Unknown keys and
// values of the wrong type or range are errors naming the field, e.g.
// "prefill.workers: want an integer ≥ 1, got -1". When disagg is absent it is
// true if prefill or decode is given, false otherwise. Engine args are
// checked by Validate (and New), which names them by path
// ("decode.args.max_num_seqs").
func ConfigFromMap(m map[string]any) (Config, error) {
	var c Config
	for _, k := range sortedKeys(m) {
		v := m[k]
		var err error
		switch k {
		case "name":
			c.Name, err = stringValue(k, v)
		case "engine":
			c.Engine, err = stringValue(k, v)
		case "router":
			c.Router, err = stringValue(k, v)
		case "transfer_host":
			c.TransferHost, err = stringValue(k, v)
		case "advertised_host":
			c.AdvertisedHost, err = stringValue(k, v)
		case "disagg":
			c.Disagg, err = boolValue(k, v)
		case "workers":
			c.Workers, err = intIn(k, v, 1, MaxWorkers)
		case "seed":
			var n int64
			n, err = jsonval.Int(k, v, 0, math.MaxInt64)
			c.Seed = uint64(n)
		case "max_memory_mb":
			c.MaxMemoryMB, err = intIn(k, v, 1, math.MaxInt32)
		case "transfer_max_conns":
			c.TransferMaxConns, err = intIn(k, v, 1, MaxTransferConns)
		case "args":
			c.Args, err = objectValue(k, v)
		case "router_options":
			c.RouterOptions, err = objectValue(k, v)
		case "prefill":
			c.Prefill, err = poolFromMap(k, v)
		case "decode":
			c.Decode, err = poolFromMap(k, v)
		case "transport":
			c.Transport, err = transportFromMap(k, v)
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: %s", k, strings.Join(configKeys, ", "))
		}
		if err != nil {
			return Config{}, err
		}
	}
	if _, given := m["disagg"]; !given {
		_, p := m["prefill"]
		_, d := m["decode"]
		c.Disagg = p || d
	}
	return c, nil
}

func poolFromMap(path string, v any) (PoolConfig, error) {
	obj, err := objectValue(path, v)
	if err != nil || obj == nil {
		return PoolConfig{}, err
	}
	var p PoolConfig
	for _, k := range sortedKeys(obj) {
		field := path + "." + k
		switch k {
		case "workers":
			p.Workers, err = intIn(field, obj[k], 1, MaxWorkers)
		case "args":
			p.Args, err = objectValue(field, obj[k])
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: args, workers", field)
		}
		if err != nil {
			return PoolConfig{}, err
		}
	}
	return p, nil
}

func transportFromMap(path string, v any) (*TransportConfig, error) {
	if s, ok := v.(string); ok {
		return transportFromString(path, s)
	}
	obj, err := objectValue(path, v)
	if err != nil || obj == nil {
		return nil, err
	}
	t := &TransportConfig{}
	for _, k := range sortedKeys(obj) {
		field := path + "." + k
		switch k {
		case "etcd":
			if o, ok := obj[k].(map[string]any); ok {
				err = etcdFromObject(field, o, t)
			} else {
				t.Etcd, err = endpointsValue(field, obj[k])
			}
		case "nats":
			if o, ok := obj[k].(map[string]any); ok {
				err = natsFromObject(field, o, t)
			} else {
				t.NATS, err = stringValue(field, obj[k])
			}
		case "namespace":
			t.Namespace, err = stringValue(field, obj[k])
		case "local":
			t.Local, err = boolValue(field, obj[k])
		case "coupled":
			t.Coupled, err = boolValue(field, obj[k])
		default:
			err = fmt.Errorf("%s: unknown key; valid keys: coupled, etcd, local, namespace, nats", field)
		}
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// pool is one resolved pool: its role, size and engine arguments.
type pool struct {
	role    engine.WorkerType
	path    string // config path of the pool's args, for error messages
	workers int
	args    engine.Args
	own     map[string]any // the pool's own args, to blame the right layer
}

// resolved is a Config with defaults applied and every part checked.
type resolved struct {
	cfg    Config
	pools  []pool
	router router.Config
	busy   bool // busy_threshold: report the capacity view as load
}

// Validate checks cfg the way New does, without starting anything, and
// returns the first error, naming the field at fault
// ("decode.args.max_num_seqs: must be at least 1, got 0").
func (c Config) Validate() error {
	_, err := resolve(c)
	return err
}

// Plan is a Config resolved: its defaults applied and every part checked,
// once. Build one with Config.Plan and start a cluster from it (Plan.New,
// Plan.NewStepped, Plan.RunStream) when the caller needs the resolved
// figures too (the time scale, the block size): the config is then
// resolved once, not once for the figures and again for the cluster. New,
// NewStepped, RunVirtual and RunStream take a Config and resolve it
// themselves. The zero Plan is not valid.
type Plan struct{ r *resolved }

// Plan resolves c: defaults applied, every field checked. An invalid c is
// an error naming the field at fault, as from Validate.
func (c Config) Plan() (Plan, error) {
	r, err := resolve(c)
	if err != nil {
		return Plan{}, err
	}
	return Plan{r: &r}, nil
}

// Config is the configuration the plan resolved, defaults applied.
func (p Plan) Config() Config { return p.r.cfg }

// Scale relates the planned cluster's modeled time to script time: the
// workers' speedup_ratio after defaults (every pool shares it), 1 when it
// is 0 (no scaling). A script's wall-time pacing (durations, rates, sleep)
// covers Scale().Ratio() times as much modeled time.
func (p Plan) Scale() timescale.Scale { return scaleOf(p.r.pools[0].args) }

// BlockSize is the workers' block_size after defaults (every pool shares
// it): the tokens a block hash covers, for a caller that hashes prompts
// itself (Request.Hashes).
func (p Plan) BlockSize() int { return p.r.router.BlockSize }

// resolve applies defaults and validates cfg, naming the field at fault.
func resolve(cfg Config) (resolved, error) {
	var r resolved
	if err := cfg.Transport.Validate(); err != nil {
		return r, err
	}
	for _, layer := range []struct {
		path string
		m    map[string]any
	}{{"args", cfg.Args}, {"prefill.args", cfg.Prefill.Args}, {"decode.args", cfg.Decode.Args}, {"router_options", cfg.RouterOptions}} {
		if err := checkFinite(layer.path, layer.m); err != nil {
			return r, err
		}
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Engine == "" {
		cfg.Engine = DefaultEngine
	}
	cfg.Engine = strings.ToLower(strings.TrimSpace(cfg.Engine))
	switch engine.EngineType(cfg.Engine) {
	case engine.EngineVLLM, engine.EngineSGLang, engine.EngineTRTLLM:
	default:
		return r, fmt.Errorf("engine: %q is not modeled; want \"vllm\", \"sglang\" or \"trtllm\"", cfg.Engine)
	}
	if cfg.Router == "" {
		cfg.Router = DefaultRouter
	}
	mode, err := router.ParseMode(cfg.Router)
	if err != nil {
		return r, fmt.Errorf("router: %w", err)
	}
	cfg.Router = string(mode)
	if cfg.TransferHost == "" {
		cfg.TransferHost = DefaultTransferHost
	}
	// Sizes first: nothing below may build anything in proportion to
	// them before they are known to be sane.
	for _, f := range []struct {
		name string
		n    int
	}{{"workers", cfg.Workers}, {"prefill.workers", cfg.Prefill.Workers}, {"decode.workers", cfg.Decode.Workers}} {
		if f.n != 0 { // 0: the default
			if _, err := jsonval.Int(f.name, f.n, 1, MaxWorkers); err != nil {
				if f.n > MaxWorkers {
					return r, fmt.Errorf("%w (%d is the limit of workers per cluster)", err, MaxWorkers)
				}
				return r, err
			}
		}
	}
	if cfg.Disagg && cfg.Prefill.Workers+cfg.Decode.Workers > MaxWorkers {
		return r, fmt.Errorf("prefill.workers + decode.workers: want at most %d workers per cluster, got %d + %d",
			MaxWorkers, cfg.Prefill.Workers, cfg.Decode.Workers)
	}
	if cfg.TransferMaxConns != 0 {
		if _, err := jsonval.Int("transfer_max_conns", cfg.TransferMaxConns, 1, MaxTransferConns); err != nil {
			return r, err
		}
	}
	if cfg.MaxMemoryMB < 0 {
		return r, fmt.Errorf("max_memory_mb: want an integer ≥ 1 (or leave it out for %v of this machine's memory), got %d", DefaultMemoryFraction, cfg.MaxMemoryMB)
	}
	if err := checkEngineType("args", cfg.Args, cfg.Engine); err != nil {
		return r, err
	}
	if cfg.Disagg {
		if cfg.Prefill.Workers == 0 {
			cfg.Prefill.Workers = DefaultPoolWorkers
		}
		if cfg.Decode.Workers == 0 {
			cfg.Decode.Workers = DefaultPoolWorkers
		}
		for _, p := range []struct {
			role engine.WorkerType
			name string
			pc   PoolConfig
		}{{engine.WorkerPrefill, "prefill", cfg.Prefill}, {engine.WorkerDecode, "decode", cfg.Decode}} {
			args, err := poolArgs(cfg, p.role, p.name, p.pc.Args)
			if err != nil {
				return r, err
			}
			r.pools = append(r.pools, pool{role: p.role, path: p.name + ".args", workers: p.pc.Workers, args: args, own: p.pc.Args})
		}
	} else {
		if cfg.Prefill.Workers != 0 || cfg.Prefill.Args != nil || cfg.Decode.Workers != 0 || cfg.Decode.Args != nil {
			return r, errors.New("disagg: prefill/decode pools are given but disagg is false; set disagg: true, or size the aggregated pool with workers")
		}
		if cfg.Workers == 0 {
			cfg.Workers = DefaultWorkers
		}
		args, err := poolArgs(cfg, engine.WorkerAggregated, "", nil)
		if err != nil {
			return r, err
		}
		r.pools = append(r.pools, pool{role: engine.WorkerAggregated, path: "args", workers: cfg.Workers, args: args})
	}
	for _, p := range r.pools {
		if err := checkTimes(cfg, p); err != nil {
			return r, err
		}
	}
	if err := checkRanks(cfg, r.pools); err != nil {
		return r, err
	}
	// Workers behind a transport run elsewhere, their pools in their own
	// processes' memory, unless this process spawns them (Local).
	if cfg.Transport == nil || cfg.Transport.Local {
		if err := checkMemory(cfg, r.pools); err != nil {
			return r, err
		}
	}
	first := r.pools[0]
	for _, p := range r.pools[1:] {
		// Blame the pool that set the key itself.
		a, b := p, first
		if _, ok := first.own["block_size"]; ok {
			a, b = first, p
		}
		if p.args.BlockSize != first.args.BlockSize {
			return r, fmt.Errorf("%s.block_size: %d differs from %s.block_size %d; one router compares block hashes, so every pool needs one block size",
				a.path, a.args.BlockSize, b.path, b.args.BlockSize)
		}
		a, b = p, first
		if _, ok := first.own["speedup_ratio"]; ok {
			a, b = first, p
		}
		if scaleOf(p.args) != scaleOf(first.args) {
			return r, fmt.Errorf("%s.speedup_ratio: %v differs from %s.speedup_ratio %v; the workers of one cluster share one modeled clock",
				a.path, a.args.SpeedupRatio, b.path, b.args.SpeedupRatio)
		}
	}
	r.router, r.busy, err = routerConfig(cfg, mode, first.args.BlockSize)
	if err != nil {
		return r, err
	}
	r.cfg = cfg
	return r, nil
}

// scaleOf is the time scale of a worker's args.
func scaleOf(a engine.Args) timescale.Scale { return timescale.New(a.SpeedupRatio) }

// WorkerArgs resolves the engine args of one worker of the given engine
// and role, as a pool of one: the laptop defaults, args over them, the
// page-size rule, and the bounds on times and memory a cluster's pools
// get. A worker that runs alone (`mocker worker`) uses it, so it takes
// exactly what a pool of an in-process cluster would. Errors name the key
// as "args.KEY".
func WorkerArgs(engineName string, role engine.WorkerType, args map[string]any) (engine.Args, error) {
	cfg := Config{Engine: engineName, Args: args}
	a, err := poolArgs(cfg, role, "", nil)
	if err != nil {
		return a, err
	}
	p := pool{role: role, path: "args", workers: 1, args: a}
	if err := checkTimes(cfg, p); err != nil {
		return a, err
	}
	if err := checkMemory(cfg, []pool{p}); err != nil {
		return a, err
	}
	return a, nil
}

// poolArgs layers the laptop defaults, the cluster's args, the pool's args
// and the role, and names any error by the layer that set the field.
func poolArgs(cfg Config, role engine.WorkerType, name string, own map[string]any) (engine.Args, error) {
	defaults := map[string]any{
		"num_gpu_blocks": DefaultNumGPUBlocks,
		"speedup_ratio":  DefaultSpeedupRatio,
		"block_size":     DefaultBlockSize,
	}
	if pageSizeGiven(cfg.Args) || pageSizeGiven(own) {
		// A page size without a block size sets the block size (SGLang).
		delete(defaults, "block_size")
	}
	ownPath := argsPath(name, own)
	if err := checkEngineType(ownPath, own, cfg.Engine); err != nil {
		return engine.Args{}, err
	}
	// The cluster sets worker_type and engine_type itself; a layer that
	// says otherwise would be silently overridden, so it is an error.
	for _, layer := range []struct {
		path string
		m    map[string]any
	}{{"args", cfg.Args}, {ownPath, own}} {
		if wt, ok := layer.m["worker_type"]; ok && wt != nil {
			if s, isStr := wt.(string); !isStr || !strings.EqualFold(s, string(role)) {
				pool := "the " + string(role) + " pool"
				if role == engine.WorkerAggregated {
					pool = "the aggregated workers (disagg is false)"
				}
				return engine.Args{}, fmt.Errorf("%s.worker_type: %s conflicts with %s; the cluster sets each worker's type from its pool, so remove worker_type",
					layer.path, quoted(wt), pool)
			}
		}
		if sg, ok := layer.m["sglang"]; ok && sg != nil && cfg.Engine != string(engine.EngineSGLang) {
			return engine.Args{}, fmt.Errorf("%s.sglang: applies only to engine \"sglang\", and this cluster's engine is %q; remove it, or set engine: \"sglang\"",
				layer.path, cfg.Engine)
		}
	}
	forced := map[string]any{"engine_type": cfg.Engine, "worker_type": string(role)}
	args, err := engine.ArgsFromMapLayers(defaults, cfg.Args, own, forced)
	if err == nil {
		return args, nil
	}
	var ae *engine.ArgError
	if !errors.As(err, &ae) {
		return engine.Args{}, fmt.Errorf("%s: %w", argsPath(name, own), err)
	}
	top, _, _ := strings.Cut(ae.Field, ".")
	path := argsPath(name, own)
	if _, inOwn := own[top]; !inOwn {
		if _, inCluster := cfg.Args[top]; inCluster {
			path = "args"
		}
	}
	return engine.Args{}, fmt.Errorf("%s.%s: %s", path, ae.Field, ae.Message)
}

// checkEngineType rejects an engine_type in args that says another engine
// than the cluster's engine key, which would otherwise be overridden.
func checkEngineType(path string, m map[string]any, eng string) error {
	et, ok := m["engine_type"]
	if !ok || et == nil {
		return nil
	}
	if s, isStr := et.(string); !isStr || !strings.EqualFold(strings.TrimSpace(s), eng) {
		return fmt.Errorf("%s.engine_type: %s conflicts with engine %q; set the cluster's engine key only, and remove engine_type", path, quoted(et), eng)
	}
	return nil
}

// checkFinite finds a NaN or infinite number anywhere in m (a script's
// NaN or Infinity), naming it by path: no key takes one, and the error
// would otherwise surface far from the field.
func checkFinite(path string, m map[string]any) error {
	for _, k := range sortedKeys(m) {
		field := path + "." + k
		switch v := m[k].(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%s: want a finite number, got %v", field, v)
			}
		case float32:
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("%s: want a finite number, got %v", field, f)
			}
		case map[string]any:
			if err := checkFinite(field, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func argsPath(name string, own map[string]any) string {
	if name == "" {
		return "args"
	}
	return name + ".args"
}

func pageSizeGiven(m map[string]any) bool {
	sg, ok := m["sglang"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = sg["page_size"]
	_, bs := m["block_size"]
	return ok && !bs
}

// routerConfig builds the router's settings from router_options.
func routerConfig(cfg Config, mode router.Mode, blockSize int) (router.Config, bool, error) {
	rc := router.DefaultConfig()
	rc.Mode = mode
	rc.Seed = cfg.Seed
	rc.BlockSize = blockSize
	var busy *float64
	for _, k := range sortedKeys(cfg.RouterOptions) {
		v := cfg.RouterOptions[k]
		field := "router_options." + k
		var err error
		switch k {
		case "busy_threshold":
			var f float64
			f, err = jsonval.Float(field, v, jsonval.AboveZero, 1)
			busy = &f
		case "router_mode":
			err = fmt.Errorf("%s: set the mode with the cluster's router key", field)
		case "block_size":
			err = fmt.Errorf("%s: the router takes the workers' block_size; set it in args", field)
		default:
			if !slices.Contains(router.OptionKeys(), k) {
				err = fmt.Errorf("%s: unknown key; valid keys: %s", field, routerOptionKeys())
				break
			}
			err = rc.SetOption(field, k, v)
		}
		if err != nil {
			return rc, false, err
		}
	}
	if busy != nil {
		if rc.ActiveDecodeBlocksThreshold != nil {
			return rc, false, errors.New("router_options.busy_threshold: give busy_threshold (held blocks count) or active_decode_blocks_threshold (held blocks do not), not both")
		}
		rc.ActiveDecodeBlocksThreshold = busy
	}
	if err := rc.Validate(); err != nil {
		return rc, false, fmt.Errorf("router_options: %w", err)
	}
	return rc, busy != nil, nil
}

// routerOptionKeys lists the keys router_options takes: the router's own
// settings but the two the cluster sets (router_mode, block_size), and
// busy_threshold.
func routerOptionKeys() string {
	keys := []string{"busy_threshold"}
	for _, k := range router.OptionKeys() {
		if k != "router_mode" && k != "block_size" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// quoted shows a script value in an error: strings quoted, anything else
// described with its type.
func quoted(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return jsonval.Describe(v)
}

// Diff names the first key, in sorted path order, whose value differs
// between c and o, as "seed 1 vs 2" or "decode.args.max_num_seqs 8 vs
// (not set)" (c's value first); "" when the two describe the same cluster.
// Numbers compare by value (5 and 5.0 alike), as a registry of clusters by name
// compares configs.
func (c Config) Diff(o Config) string {
	a, b := configTree(c), configTree(o)
	return diffTrees("", a, b)
}

// configTree is c's JSON form decoded back into maps, numbers kept exact.
func configTree(c Config) any {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Sprintf("%#v", c)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(data)
	}
	return v
}

func diffTrees(path string, a, b any) string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	// An absent object reads as an empty one, so the key inside it that
	// makes the difference is the one named.
	if aok && b == nil {
		bm, bok = map[string]any{}, true
	}
	if bok && a == nil {
		am, aok = map[string]any{}, true
	}
	if aok && bok {
		keys := sortedKeys(am)
		for _, k := range sortedKeys(bm) {
			if _, seen := am[k]; !seen {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			if d := diffTrees(sub, am[k], bm[k]); d != "" {
				return d
			}
		}
		return ""
	}
	as, bs := treeString(a), treeString(b)
	if as == bs {
		return ""
	}
	if path == "" {
		path = "config"
	}
	return path + " " + as + " vs " + bs
}

// treeString shows one leaf of a config tree; an empty object, an empty
// list and null all read "(not set)", as they configure the same cluster.
func treeString(v any) string {
	switch x := v.(type) {
	case nil:
		return "(not set)"
	case map[string]any:
		if len(x) == 0 {
			return "(not set)"
		}
	case []any:
		if len(x) == 0 {
			return "(not set)"
		}
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	case string:
		return strconv.Quote(x)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func stringValue(field string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: want a string, got %s", field, jsonval.Describe(v))
	}
	return s, nil
}

func boolValue(field string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: want a boolean, got %s", field, jsonval.Describe(v))
	}
	return b, nil
}

func objectValue(field string, v any) (map[string]any, error) {
	switch o := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return o, nil
	}
	return nil, fmt.Errorf("%s: want an object, got %s", field, jsonval.Describe(v))
}

// intIn reads an integer in [lo, hi] as an int.
func intIn(field string, v any, lo, hi int64) (int, error) {
	n, err := jsonval.Int(field, v, lo, hi)
	return int(n), err
}

// checkTimes bounds the pool's engine args that become durations, naming
// the layer that set each one.
func checkTimes(cfg Config, p pool) error {
	a := p.args
	for _, f := range []struct {
		key string
		v   float64
	}{{"speedup_ratio", a.SpeedupRatio}, {"decode_speedup_ratio", a.DecodeSpeedupRatio}} {
		if f.v == 0 && f.key == "speedup_ratio" {
			continue // no scaling
		}
		if _, err := jsonval.Float(argPath(cfg, p, f.key), f.v, MinSpeedupRatio, MaxSpeedupRatio); err != nil {
			return err
		}
	}
	if ms, ok := a.AbortTimeoutMs(); ok {
		if _, err := jsonval.Int(argPath(cfg, p, "kv_transfer_abort_timeout_ms"), ms, 0, MaxTimeoutMs); err != nil {
			return err
		}
	}
	if _, err := jsonval.Int(argPath(cfg, p, "handoff_session_timeout_ms"), a.HandoffSessionTimeoutMs, 1, MaxTimeoutMs); err != nil {
		return err
	}
	return nil
}

// argPath names key as the layer that set it: the pool's own args, the
// cluster's args, or (a default) the pool's path.
func argPath(cfg Config, p pool, key string) string {
	if _, own := p.own[key]; !own {
		if _, inCluster := cfg.Args[key]; inCluster {
			return "args." + key
		}
	}
	return p.path + "." + key
}

// checkRanks bounds the data-parallel ranks of the whole cluster, before
// any is built.
func checkRanks(cfg Config, pools []pool) error {
	total := 0
	for _, p := range pools {
		if p.args.DPSize > MaxWorkers || p.workers*p.args.DPSize > MaxWorkers-total {
			return fmt.Errorf("%s: %d workers × dp_size %d ranks over the pools exceed %d ranks per cluster; lower dp_size or workers",
				argPath(cfg, p, "dp_size"), p.workers, p.args.DPSize, MaxWorkers)
		}
		total += p.workers * p.args.DPSize
	}
	return nil
}

// checkMemory refuses pools whose estimated memory exceeds the limit,
// before engine.New allocates them.
func checkMemory(cfg Config, pools []pool) error {
	limitMB, why := float64(cfg.MaxMemoryMB), "max_memory_mb"
	if cfg.MaxMemoryMB == 0 {
		limitMB, why = defaultMemoryLimitMB()
	}
	var total float64
	worst := pools[0]
	for _, p := range pools {
		total += poolBytes(p)
		if poolBytes(p) > poolBytes(worst) {
			worst = p
		}
	}
	if total/(1<<20) <= limitMB {
		return nil
	}
	ranks := ""
	if worst.args.DPSize > 1 {
		ranks = fmt.Sprintf(" × dp_size %d", worst.args.DPSize)
	}
	return fmt.Errorf("%s: %d blocks × %d workers%s (%d bytes a block) need about %s for the KV pools of this cluster, over the limit of %s (%s); lower num_gpu_blocks or workers, or set max_memory_mb",
		argPath(cfg, worst, "num_gpu_blocks"), worst.args.NumGPUBlocks, worst.workers, ranks, BytesPerBlock,
		formatMB(total/(1<<20)), formatMB(limitMB), why)
}

func poolBytes(p pool) float64 {
	return float64(p.args.NumGPUBlocks) * float64(p.workers) * float64(max(p.args.DPSize, 1)) * BytesPerBlock
}

func formatMB(mb float64) string {
	if mb >= 1024 {
		return strconv.FormatFloat(mb/1024, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(mb, 'f', 0, 64) + " MiB"
}

var machineMemory struct {
	once sync.Once
	mb   float64
}

// defaultMemoryLimitMB is DefaultMemoryFraction of MemTotal, and says so.
func defaultMemoryLimitMB() (float64, string) {
	machineMemory.once.Do(func() { machineMemory.mb = readMemTotalMB("/proc/meminfo") })
	if machineMemory.mb <= 0 {
		return fallbackMemoryMB, "the default where the machine's memory is unknown; set max_memory_mb"
	}
	return machineMemory.mb * DefaultMemoryFraction, fmt.Sprintf("%v of this machine's %s; set max_memory_mb to change it",
		DefaultMemoryFraction, formatMB(machineMemory.mb))
}

// readMemTotalMB reads MemTotal from a meminfo file, 0 when it cannot.
func readMemTotalMB(path string) float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0
		}
		return kb / 1024
	}
	return 0
}

// NameInUseError is asking for a cluster by a name that another config
// already uses.
type NameInUseError struct {
	// Name is the cluster name asked for.
	Name string
	// Diff is Config.Diff of the existing config and the new one, e.g.
	// "seed 1 vs 2".
	Diff string
}

// Error reads, e.g., `name: cluster "default" already exists with another
// config: seed 1 vs 2; …`, suggesting the two ways out.
func (e *NameInUseError) Error() string {
	return fmt.Sprintf("name: cluster %q already exists with another config: %s (existing vs this one); give this cluster another name (name: %q), or the same config",
		e.Name, e.Diff, e.Name+"-2")
}
