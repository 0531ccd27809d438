/**
 * Type declarations of the k6/x/mocker module: mock disaggregated LLM
 * serving clusters for load scripts run by `mocker run`.
 *
 * Point an editor at this file with a jsconfig.json (or tsconfig.json) next
 * to your scripts, e.g. `{"compilerOptions": {"checkJs": true}, "files":
 * ["path/to/mocker/xk6mocker/index.d.ts"]}`, or with a
 * `/// <reference path="…/xk6mocker/index.d.ts" />` line at the top of a
 * script. Every time is in modeled milliseconds unless it says wall time.
 * `mocker args` lists every engine argument, `mocker metrics` every metric.
 */
declare module 'k6/x/mocker' {
  /** The scheduler model of every worker. */
  export type Engine = 'vllm' | 'sglang' | 'trtllm';

  /** How the router picks a worker. */
  export type RouterMode = 'round-robin' | 'random' | 'least-loaded' | 'kv' | 'power-of-two';

  /** How a request ended. */
  export type Outcome = 'completed' | 'aborted' | 'rejected' | 'error';

  /** How a prefill KV hold ended; '' while it lasts, or without a hold. */
  export type HoldOutcome = 'transferred' | 'aborted' | '';

  /** The SGLang knobs of the engine args, read when the engine is sglang. */
  export interface SGLangArgs {
    schedule_policy?: 'fifo' | 'fcfs' | 'lpm';
    /** Radix cache page in tokens; must equal block_size. */
    page_size?: number;
    max_prefill_tokens?: number;
    /** A multiple of block_size. */
    chunked_prefill_size?: number;
    clip_max_new_tokens?: number;
    schedule_conservativeness?: number;
    max_running_requests?: number | null;
    /** Prefill computes before decode reserved, so it can strand KV as vLLM does. */
    optimistic_prefill?: boolean;
  }

  /** The TensorRT-LLM knobs of the engine args, read when the engine is trtllm. */
  export interface TRTLLMArgs {
    /** guaranteed_no_evict (default) sets aside prompt plus max_tokens and never preempts. */
    capacity_scheduler_policy?: 'guaranteed_no_evict' | 'max_utilization';
  }

  /**
   * Dynamo's MockEngineArgs keys that mocker accepts and ignores, or
   * accepts only when off (see `mocker args`), so a config copied from
   * Dynamo loads.
   */
  export interface DynamoOnlyEngineArgs {
    has_perf_model?: unknown;
    startup_time?: number;
    enable_local_indexer?: boolean;
    bootstrap_port?: number;
    zmq_kv_events_port?: number;
    zmq_replay_port?: number;
    router_queue_policy?: string;
    response_replay_trace_path?: string;
    reasoning?: Record<string, unknown>;
    gpu_memory_utilization?: number;
    mem_fraction_static?: number;
    free_gpu_memory_fraction?: number;
    aic_system?: string;
    aic_systems_path?: string;
    aic_backend_version?: string;
    aic_model_path?: string;
    aic_tp_size?: number;
    aic_moe_tp_size?: number;
    aic_moe_ep_size?: number;
    aic_attention_dp_size?: number;
    aic_gemm_dtype?: string;
    aic_moe_dtype?: string;
    aic_fmha_dtype?: string;
    aic_kv_cache_dtype?: string;
    aic_comm_dtype?: string;
    aic_nextn_accept_rates?: string;
    aic_mtp_seed?: number;
    offload_batch_size?: number;
    bandwidth_g1_to_g2_gbps?: number;
    bandwidth_g2_to_g1_gbps?: number;
    bandwidth_g2_to_g3_gbps?: number;
    bandwidth_g3_to_g2_gbps?: number;
    bandwidth_g2_to_g4_gbps?: number;
    bandwidth_g4_to_g2_gbps?: number;
    g1_backend?: 'kvbm' | 'native';
    /** Rejected when set: AIConfigurator timing is not modeled. */
    aic_backend?: never;
    /** Rejected when set: MTP is not modeled. */
    aic_nextn?: never;
    /** Host (G2) offload tier in blocks (vllm and trtllm, with prefix caching); 0: none. */
    num_g2_blocks?: number;
    /** Disk (G3) tier in blocks, below the host tier (needs num_g2_blocks); 0: none. */
    num_g3_blocks?: number;
    /** Object storage (G4) below the host tier, unbounded (needs num_g2_blocks). */
    enable_g4_storage?: boolean;
  }

  /**
   * One worker's engine arguments, Dynamo's MockEngineArgs keys. In a
   * cluster config, `args` applies to every worker and a pool's `args`
   * override it key by key. `mocker args` explains each.
   */
  export interface EngineArgs extends DynamoOnlyEngineArgs {
    /** Set by the cluster from `engine`; a different value is an error. */
    engine_type?: Engine;
    /** KV pool size in blocks (cluster default 1024). */
    num_gpu_blocks?: number;
    /** Tokens per KV block (cluster default 16). */
    block_size?: number;
    /** vLLM only. */
    max_model_len?: number | null;
    /** null: unbounded. */
    max_num_seqs?: number | null;
    /** null: unbounded. */
    max_num_batched_tokens?: number | null;
    enable_prefix_caching?: boolean;
    enable_chunked_prefill?: boolean;
    /** Modeled time per wall time (cluster default 10). */
    speedup_ratio?: number;
    decode_speedup_ratio?: number;
    /** Data-parallel ranks per worker (default 1), each its own scheduler and pool of num_gpu_blocks. */
    dp_size?: number;
    /** Set by the cluster from the pool; a different value is an error. */
    worker_type?: 'aggregated' | 'prefill' | 'decode';
    is_prefill?: boolean;
    is_decode?: boolean;
    preemption_mode?: 'lifo' | 'fifo';
    kv_bytes_per_token?: number | null;
    /** Dynamo main's name for kv_bytes_per_token. */
    kv_cache_bytes_per_token?: number | null;
    /** Another name for kv_bytes_per_token. */
    kv_transfer_bytes_per_token?: number | null;
    /** A decode reservation also takes a max_num_seqs slot (mocker's former rule). */
    reserve_takes_slot?: boolean;
    /** Reproduce Dynamo main's numbers where mocker differs on purpose (docs/fidelity.md). */
    dynamo_compat?: boolean;
    timing_model?: 'polynomial' | 'interpolated' | { type: 'polynomial' | 'interpolated' | 'fixed'; prefill_ms?: number; decode_ms?: number };
    /** GB/s; 0 means transfers take no time. */
    kv_transfer_bandwidth?: number | null;
    kv_transfer_timing_mode?: 'full_prompt' | 'destination_missing';
    /** A hold no decode claimed within this long is aborted; 0 or null: never. */
    kv_transfer_abort_timeout_ms?: number | null;
    handoff_session_timeout_ms?: number;
    /** The router-facing load counts held blocks. */
    router_load_includes_held?: boolean;
    planner_profile_data?: string;
    sglang?: SGLangArgs;
    trtllm?: TRTLLMArgs;
  }

  /** One disaggregated pool. */
  export interface PoolConfig {
    /** Pool size, default 1. */
    workers?: number;
    /** Override the cluster's args for this pool. */
    args?: EngineArgs;
  }

  /** The router's settings, Dynamo's keys plus busy_threshold. */
  export interface RouterOptions {
    /** Busy while allocated blocks, held ones included, exceed this fraction. */
    busy_threshold?: number;
    /** Busy while router-facing blocks exceed this fraction. */
    active_decode_blocks_threshold?: number;
    /** Busy while prompt tokens routed and not yet prefilled exceed this. */
    active_prefill_tokens_threshold?: number;
    active_prefill_tokens_threshold_frac?: number;
    overlap_score_weight?: number;
    router_temperature?: number;
    use_kv_events?: boolean;
    router_ttl_secs?: number;
    router_max_tree_size?: number;
    router_request_ttl_secs?: number;
    /** Fraction of router_max_tree_size the approximate indexer prunes down to (Dynamo's default 0.8). */
    router_prune_target_ratio?: number;
    /** Dynamo main's name for overlap_score_weight. */
    prefill_load_scale?: number;
    /** Cost units per request in flight on a decode worker (Dynamo main). */
    decode_active_request_weight?: number;
    /** Dynamo main's kv cost formula and random tie-break. */
    dynamo_compat?: boolean;
    /** What a prompt block on a worker's host tier, continuing its GPU prefix, counts in kv mode's overlap (Dynamo's default 0.75). */
    host_cache_hit_weight?: number;
    /** The same for a block on its disk tier or in object storage (Dynamo's default 0.25). */
    disk_cache_hit_weight?: number;
    seed?: number;
  }

  /** PEM files of a TLS client: the server's CA, and a client certificate and key for servers that verify clients. */
  export interface TLSFiles {
    ca?: string;
    cert?: string;
    key?: string;
  }

  /** NATS with credentials: one of user and password, token, creds (a credentials file) or nkey (a seed file); secrets may also come from MOCKER_NATS_USER, MOCKER_NATS_PASSWORD, MOCKER_NATS_TOKEN. */
  export interface NATSConfig {
    url: string;
    user?: string;
    password?: string;
    token?: string;
    creds?: string;
    nkey?: string;
    tls?: TLSFiles;
  }

  /** etcd with credentials; they may also come from MOCKER_ETCD_USERNAME and MOCKER_ETCD_PASSWORD. */
  export interface EtcdConfig {
    endpoints: string | string[];
    username?: string;
    password?: string;
    tls?: TLSFiles;
  }

  /** Services of the distributed transport: attach to `mocker worker` processes registered in etcd under namespace. */
  export interface TransportConfig {
    etcd?: string | string[] | EtcdConfig;
    nats?: string | NATSConfig;
    /** Default 'mocker'. */
    namespace?: string;
    /** Same as transport: 'local'. */
    local?: boolean;
    /**
     * The cluster drives the workers' clocks: modeled time passes no
     * message between processes, so the figures are the in-process
     * cluster's on any host, and --clock virtual works. The workers must
     * serve this cluster alone.
     */
    coupled?: boolean;
  }

  /** What mocker.cluster() takes; every key is optional. */
  export interface ClusterConfig {
    /** Clusters are shared by name across the run's VUs; default 'default'. */
    name?: string;
    /** Default 'vllm'. */
    engine?: Engine;
    /** Separate prefill and decode pools; default true when prefill or decode is given. */
    disagg?: boolean;
    /** Default 'round-robin'. */
    router?: RouterMode;
    /** Aggregated pool size, default 2. */
    workers?: number;
    prefill?: PoolConfig;
    decode?: PoolConfig;
    /** Engine args of every worker. */
    args?: EngineArgs;
    router_options?: RouterOptions;
    /** Seeds prompts, outputs and routing draws. */
    seed?: number;
    transfer_host?: string;
    advertised_host?: string;
    /** Decode connections each prefill's transfer server serves at once (default 1024). */
    transfer_max_conns?: number;
    /** Bound on the memory the KV pools may take, in MB (default: half the machine's); remote workers count only under transport 'local'. */
    max_memory_mb?: number;
    /** 'local': embedded etcd and NATS, the pools spawned as `mocker worker` child processes. */
    transport?: TransportConfig | 'local';
  }

  /** One request: prompt_tokens (or tokens) is required. */
  export interface Request {
    prompt_tokens?: number;
    /** Default 16. */
    max_tokens?: number;
    /** Requests with the same prefix share their first prefix_tokens tokens. */
    prefix?: string;
    prefix_tokens?: number;
    /** Explicit token ids instead of prompt_tokens. */
    tokens?: number[];
  }

  /**
   * How one request ended. Times are modeled ms, 0 when not applicable.
   * A result reads, enumerates, serialises and changes as a plain object,
   * but cannot be frozen or sealed, nor have a property made read-only or
   * an accessor (a TypeError): freeze a copy, `Object.freeze({...r})`.
   */
  export interface Result {
    outcome: Outcome;
    /** Why, when not completed in full; null otherwise. */
    error: string | null;
    ttft_ms: number;
    itl_ms: number;
    e2e_ms: number;
    /** How long the prefill worker held the KV. */
    pin_ms: number;
    transfer_ms: number;
    /** Decode arrival to its reservation. */
    decode_wait_ms: number;
    output_tokens: number;
    cached_tokens: number;
    prefill_worker: string;
    decode_worker: string;
    /** The data-parallel ranks within those workers that served the request (0 with dp_size 1). */
    prefill_dp_rank: number;
    decode_dp_rank: number;
    /** 0 for aggregated requests. */
    transfer_id: number;
    pinned: boolean;
    pin_outcome: HoldOutcome;
    /** Refused because every prefill worker was busy. */
    prefill_rejected: boolean;
    /** Completed, but output stopped short of max_tokens. */
    truncated: boolean;
  }

  /** One worker's occupancy: one entry per data-parallel rank, all with the worker's name. */
  export interface WorkerStats {
    name: string;
    dp_rank: number;
    role: 'aggregated' | 'prefill' | 'decode';
    total_blocks: number;
    active_blocks: number;
    inactive_blocks: number;
    free_blocks: number;
    held_blocks: number;
    reserved_blocks: number;
    running: number;
    waiting: number;
    held_requests: number;
    passes: number;
    /** A prefill worker's transfer server, host:port. */
    transfer_addr: string;
    /** The rank's host (G2) offload tier: blocks held now, and its size (num_g2_blocks); 0 without one. */
    g2_blocks: number;
    g2_capacity: number;
    /** Its disk (G3) tier (num_g3_blocks) and object storage (G4): blocks held now, and the disk tier's size; 0 without them. */
    g3_blocks: number;
    g3_capacity: number;
    g4_blocks: number;
    /** Blocks copied into each tier (the host tier from the GPU pool, the disk tier from the host tier) and prefix hits found in each; 0 without the tier. */
    g2_offloaded: number;
    g2_onboarded: number;
    g3_offloaded: number;
    g3_onboarded: number;
    g4_onboarded: number;
  }

  /** Occupancy now and counters since the cluster started. */
  export interface Stats {
    requests: number;
    completed: number;
    aborted: number;
    rejected: number;
    errored: number;
    in_flight: number;
    prefill_rejections: number;
    pins: number;
    pins_released: number;
    /** Holds ended by their abort or session deadline. */
    pins_aborted: number;
    /** Holds given up because the request was refused, withdrawn or cut short. */
    pins_cancelled: number;
    /** Holds ended by abort: what mocker_kv_aborts counts. */
    aborts: number;
    pin_ms_total: number;
    pin_ms_max: number;
    transfers_started: number;
    transfers_completed: number;
    transfers_aborted: number;
    held_blocks: number;
    reserved_blocks: number;
    active_blocks: number;
    peak_held_blocks: number;
    /** The workers' host (G2) offload tiers summed: blocks held now, size, and blocks onboarded on prefix hits; 0 without a tier. */
    g2_blocks: number;
    g2_capacity: number;
    g2_onboarded: number;
    /** The workers' disk (G3) tiers and object storage (G4) summed: blocks held now, the disk tiers' size, and blocks prefix hits found there (staged back through the host tier); 0 without them. g2_onboarded counts the hits found in the host tiers themselves. */
    g3_blocks: number;
    g3_capacity: number;
    g3_onboarded: number;
    g4_blocks: number;
    g4_onboarded: number;
    /** The cluster's modeled time. */
    now_ms: number;
    workers: WorkerStats[];
    /** stats(): always true; drain(): whether everything ended in time. */
    drained: boolean;
    /** drain() only, when it gave up: why. */
    error?: string;
  }

  /** One prefill KV hold of the stranding graph. */
  export interface Hold {
    transfer_id: number;
    request_id: number;
    prefill_worker: string;
    decode_worker: string;
    prefill_dp_rank: number;
    decode_dp_rank: number;
    blocks: number;
    start_ms: number;
    /** 0 while it lasts. */
    end_ms: number;
    duration_ms: number;
    /** The decode connected and the transfer started. */
    claimed: boolean;
    /** When the transfer started; absent from the summary data while 0. */
    transfer_start_ms?: number;
    outcome: HoldOutcome;
  }

  /** The handle mocker.cluster() returns; the same cluster in every VU. */
  export interface Cluster {
    readonly name: string;
    /** Modeled ms per wall ms. */
    readonly speedup_ratio: number;
    /** Blocks the VU until the request ends. */
    generate(request: Request): Result;
    /** The same as a Promise, settled on the VU's event loop. */
    generateAsync(request: Request): Promise<Result>;
    stats(): Stats;
    /**
     * Waits up to timeoutMs of wall time (default 30000) for in-flight work,
     * then adds to mocker_requests_lost the requests whose outcome the
     * metrics lack: call it in teardown.
     */
    drain(timeoutMs?: number): Stats;
    /** Blocks the VU for ms of modeled time. */
    sleep(ms: number): void;
    /** The open holds and the longest and latest ended ones. */
    holds(): Hold[];
  }

  /** Hold durations in modeled ms. */
  export interface HoldDurations {
    count: number;
    avg: number;
    p50: number;
    p90: number;
    p99: number;
    max: number;
  }

  /** A cluster's requests by how they ended. */
  export interface RequestCounts {
    total: number;
    completed: number;
    aborted: number;
    rejected: number;
    error: number;
    /** Ended after their VU was interrupted: not in the metrics. */
    outside_iterations: number;
  }

  /** A cluster's prefill KV holds. */
  export interface HoldCounts {
    started: number;
    /** By a transfer. */
    released: number;
    /** By the abort or session deadline. */
    aborted: number;
    /** Given up: the request was refused, withdrawn or cut short. */
    cancelled: number;
    /** Still held at the summary. */
    held: number;
  }

  /** One cluster's KV handoff figures in the summary data. */
  export interface ClusterSummary {
    engine: Engine;
    router: RouterMode;
    /** '2 prefill / 2 decode', '4 aggregated'. */
    topology: string;
    /** How the workers are reached: 'in-process', 'local' or 'etcd+nats'. */
    transport: string;
    requests: RequestCounts;
    holds: HoldCounts;
    /** null when no hold ended. */
    hold_duration_ms: HoldDurations | null;
    peak_held_blocks: number;
    prefill_refusals: number;
    /** The workers' host (G2) offload tiers summed: blocks held at the end, size, and blocks onboarded on prefix hits; absent without a tier. */
    g2_blocks?: number;
    g2_capacity?: number;
    g2_onboarded?: number;
    /** The workers' disk (G3) tiers and object storage (G4) summed, as g2_*: blocks held at the end, the disk tiers' size, blocks prefix hits found there; absent without them. */
    g3_blocks?: number;
    g3_capacity?: number;
    g3_onboarded?: number;
    g4_blocks?: number;
    g4_onboarded?: number;
    /** Longest ended holds, longest first. */
    longest_holds: Hold[];
    /** The most wall ms the run (its paced clock, or on --clock wall the cluster's loop) ran behind the wall clock; 0 on --clock virtual. */
    clock_lag_peak_ms: number;
    /** Set when that lag was over a tenth of the run: the host could not keep up. */
    lag_warning?: string;
    /** How far the cluster's modeled clock got: script time × speedup_ratio, in ms. */
    modeled_ms: number;
    /** The cluster's speedup_ratio. */
    speedup_ratio: number;
    /** Request-plane messages a distributed cluster dropped unapplied (forged, replayed, malformed or past a bound); absent when none. */
    plane_rejected_total?: number;
  }

  /** mocker.trace's options: how the trace is played, as `mocker replay`'s flags. */
  export interface TraceOptions {
    /** Tokens one hash id stands for (default 512): --trace-block-size. */
    block_size?: number;
    /** Divide arrival times by this (default 1; 2 sends twice as fast): --rate-scale. */
    rate_scale?: number;
    /** Send at most this many requests, turns included (0: all): --max-requests. */
    max_requests?: number;
    /** Send no request at or after this modeled ms (0: the whole trace): --duration. */
    duration_ms?: number;
  }

  /** What trace.play's onResult learns of a request besides its result. */
  export interface PlayedRequest {
    /** The trace row it came from, from 1. */
    line: number;
    /** Its session; '' for a request on its own. */
    session: string;
    /** When it arrived and ended, in modeled ms from the trace's first arrival. */
    arrived_ms: number;
    ended_ms: number;
  }

  /** A trace loaded by mocker.trace(), to play into a cluster. */
  export interface Trace {
    /**
     * The requests play sends, turns included, within max_requests: for a
     * threshold such as mocker_requests: [`count==${trace.requests}`],
     * which fails when the replay was cut short. At most that many when
     * duration_ms cuts a session.
     */
    readonly requests: number;
    /**
     * Sends every request of the trace to the cluster at its arrival time
     * (a session's later turn its delay after the turn before ended),
     * blocking the VU until all have ended; each counts in the metrics as
     * generate's do, then goes to onResult. Needs --clock virtual or the
     * paced clock. Returns the number of requests sent.
     */
    play(cluster: Cluster, onResult?: (result: Result, request: PlayedRequest) => void): number;
  }

  /** handleSummary's data.mocker, also in the --summary-export file. */
  export interface SummaryData {
    clusters: { [name: string]: ClusterSummary };
  }

  /** The module's default export. */
  export interface Mocker {
    /** The run's cluster called config.name, built on first use. */
    cluster(config?: ClusterConfig): Cluster;
    /** A trace read in the init context: open(path), or open(path, 'b') for gzip. */
    trace(data: string | ArrayBuffer, options?: TraceOptions): Trace;
  }

  /** The run's cluster called config.name, built on first use. */
  export function cluster(config?: ClusterConfig): Cluster;

  /** A trace read in the init context: open(path), or open(path, 'b') for gzip. */
  export function trace(data: string | ArrayBuffer, options?: TraceOptions): Trace;

  const mocker: Mocker;
  export default mocker;
}
