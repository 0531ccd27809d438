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
// cluster sets engine_type from Engine and worker_type from the pool. Every
// pool must share block_size (one router compares block hashes) and
// speedup_ratio (one modeled clock).
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
// SGLang is destination-first: the decode worker reserves first
// (decode_kv_wait_start, decode_kv_reserved); only then is the prefill
// submitted and told its destination is ready (engine.Live.DestinationReady),
// so it leaves its bootstrap queue and computes. Its transfer starts the
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
// the hold's end is known, so PinOutcome and PinMs are always final.
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
