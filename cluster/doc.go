// Package cluster assembles mock workers, a router and the prefill workers'
// KV-transfer servers into one in-process cluster, and runs requests through
// it end to end, disaggregated handoff included. It is what a load script's
// mocker.cluster({...}) builds.
//
// # Shape
//
// Every worker is an engine.Worker on its own live driver goroutine, named
// by pool and index ("worker-0" aggregated, "prefill-0", "decode-1"); all of
// them share one modeled clock origin, so modeled times from different
// workers compare. Every prefill worker has a bootstrap.Server on
// TransferHost (loopback by default, any free port), and the decode side of
// a handoff really connects to it over TCP. The workers' outputs go through
// one dispatcher goroutine that updates request state, keeps the forensic
// log, feeds the router (KV events, load after every pass, first token and
// completion) and tells the transfer servers how each hold ended.
//
// # Defaults
//
// New(Config{}) runs two aggregated vLLM workers behind a round-robin
// router. A disaggregated cluster (Disagg, or prefill/decode given in a
// script) defaults to one prefill and one decode worker. Engine arguments
// start from laptop-sized defaults — block_size 16, num_gpu_blocks 1024,
// speedup_ratio 10 — under the cluster's args, under each pool's args; the
// cluster sets engine_type from Engine and worker_type from the pool, and an
// engine_type or worker_type in args that says otherwise is an error, as is
// an sglang object when the engine is vllm. Every pool must share
// block_size (one router compares block hashes) and speedup_ratio (one
// modeled clock). An explicit block_size 0 does not mean the laptop default
// 16: it means the engine's own default, 64 for vLLM and page_size for
// SGLang, as in Dynamo.
//
// # The handoff
//
// vLLM is source-first: the router picks a prefill and a decode worker; the
// prefill computes the prompt and the first token and holds the KV
// (prefill_kv_pin_start; its abort clock starts now); the cluster opens a
// transfer room under a fresh transfer id and hands the decode side the
// vLLM params {transfer_id, prefill_host, prefill_port}. The decode worker
// reserves blocks and a sequence slot through its own scheduler
// (decode_kv_wait_start, then decode_kv_reserved), then connects to the
// prefill's transfer server. The connection starts the modeled transfer on
// the prefill (transfer_start), whose end releases the hold as transferred
// (prefill_kv_pin_end); the server answers ACK, the decode activates the
// request and generates the remaining tokens. If the prefill's
// kv_transfer_abort_timeout_ms (or handoff_session_timeout_ms) passes first,
// the hold ends as aborted, the server answers ABORT to the decode whenever
// it connects, the decode frees its reservation and the request ends
// "aborted".
//
// SGLang is destination-first: the request reaches both workers at once;
// the prefill waits in its bootstrap queue, computing and holding nothing,
// while the decode worker reserves (decode_kv_wait_start,
// decode_kv_reserved); the reservation tells the prefill its destination is
// ready (engine.Live.DestinationReadyAt), so it leaves its bootstrap queue
// and computes. If the decode cannot reserve within
// handoff_session_timeout_ms, the prefill is dropped from its bootstrap
// queue, the pending reservation is withdrawn and the request ends
// "rejected" with a "handoff timeout" reason. Its transfer starts the
// moment its KV is held (prefill_kv_pin_start and transfer_start at the same
// modeled instant; the engine starts it, not the decode's connection), and
// the hold lasts the modeled transfer: a saturated decode pool makes
// requests wait for a reservation before any KV exists, instead of
// stranding held KV until it aborts. The decode reads SGLang's params
// {bootstrap_host, bootstrap_port, bootstrap_room}, waits at the transfer
// server for ACK, activates and decodes. With sglang.optimistic_prefill the
// prefill computes at once and the handoff runs source-first, stranding and
// aborting like vLLM's.
//
// Whatever the path, a Result whose prefill held KV is returned only once
// the hold's end is known, so PinOutcome and PinMs are always final. A
// completion cut short by a length limit (the sequence outgrew the decode's
// KV pool, or reached max_model_len) stays "completed" with Truncated set
// and Error naming the limit.
//
// # Modeled time and wall time
//
// Every time a Result, an event or Stats reports is modeled time. The
// requests of a load script arrive at the cluster's clock (wall time since
// New × speedup_ratio), because script pacing — durations, arrival rates,
// sleeps — is wall time; that part is not speed-invariant. Each later step
// of a handoff is stamped from the modeled time of the event that caused
// it, not from the wall clock: the decode reserves at the instant the
// prefill began to hold (source-first) or the request arrived
// (destination-first); the transfer starts at the decode's reservation
// (remembered per transfer, and used when the decode's connection reaches
// the prefill's transfer server); the decode activates at the source's
// release; an aborted reservation is freed at the abort; the prefill is
// readied at the decode's reservation. The goroutines and loopback sockets
// between the steps therefore cost no modeled time: on an idle cluster a
// handoff's pin lasts the decode's wait plus the transfer, at any speedup.
// A worker that is already past a step's time applies it at its own time
// (engine.Live), so under load a step can still wait for a busy worker,
// as it would on real hardware; and a worker that falls behind the wall
// clock delivers its outputs late to the others, which is the one way host
// latency can still reach modeled times, under heavy load at high speedups.
// A claim stamped before a hold's abort deadline that arrives within a
// wall-clock grace after it still wins (engine.DefaultDeadlineGrace, cut to
// engine.BusyDeadlineGrace on a prefill worker with work waiting).
//
// # Capacity refusals
//
// Held KV fills prefill pools; later prefills then queue in the engine. With
// a busy threshold (see RouterOptionsHelp) the router refuses them instead:
// the request ends "rejected" with PrefillRejected and "all prefill workers
// busy" (a saturated decode pool: "all decode workers busy", without
// PrefillRejected), the pool named by the router's refusal itself. Engine
// refusals (a prompt that never fits, or is too long) end "rejected" with
// the engine's reason.
//
// # Forensics
//
// Every handoff transition is one slog record on Config.Logger (message =
// event name; attributes t_ms, request_id, transfer_id, prefill_worker,
// decode_worker, and outcome, duration_ms, blocks, missing_tokens, wait_ms
// where they apply) and an Event kept in a bounded ring (Events). Holds and
// HoldGraph rebuild the stranding graph in bounded memory.
//
// # Invariants
//
// CheckInvariants, called after Drain, checks DESIGN §9: block conservation
// per worker, request conservation, holds and transfers accounted for, no
// KV held, reserved or active once drained, and causality per request.
package cluster
