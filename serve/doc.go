// Package serve puts a mock cluster (package cluster) behind the HTTP
// surface real serving stacks speak, so that routers, gateways and load
// tools written for vLLM or SGLang can be pointed at it: OpenAI's
// completions and chat completions APIs, streamed as server-sent events or
// not, /v1/models, /health, and Prometheus metrics under vLLM's,
// TensorRT-LLM's or SGLang's names. `mocker serve` runs it. With Options.KVEvents it also
// publishes every worker rank's KV cache events over ZMQ as vLLM does.
//
// # Requests
//
// POST /v1/completions takes prompt as a string, an array of one string,
// an array of token ids or an array of one such array; POST
// /v1/chat/completions takes messages whose content is a string or text
// parts. Token ids are used as they are. Text goes through Tokenize, a
// built-in deterministic tokenizer (one token per word piece, no
// vocabulary file), so two requests that share a text prefix share KV
// blocks, the router's prefix matches and the prefix cache's hits. A chat
// is rendered as "<|role|>\n" + content + "\n" per message, then
// "<|assistant|>\n".
//
// The answer is exactly max_tokens tokens (max_completion_tokens for a
// chat; when neither is given, 16 for a completion and the rest of the
// context for a chat), as vLLM's ignore_eos would make it, unless the
// model cuts it short (the sequence outgrew its KV pool); finish_reason is
// "length". Its text is filler words drawn from Options.Seed and the
// prompt, or, with Options.Echo, the prompt's own pieces (a chat's last
// user message) over and over. usage counts prompt and completion tokens,
// and prompt_tokens_details.cached_tokens is the prompt's prefix-cache
// hit on the worker that prefilled it. n must be 1.
//
// # Time
//
// The cluster runs paced against the wall clock at its speedup_ratio: a
// token leaves when the wall clock reaches its modeled time divided by
// speedup_ratio, so the TTFT and inter-token gaps a client measures are
// the model's, scaled. A stream writes each token as the cluster's loop
// produces it (the loop only records it; the request's handler writes),
// at most one write per pacing grain (cluster.PaceSlack): tokens that
// come within a grain of the stream's last write leave together at the
// grain's end, one chunk each. A slow client lags alone: its lag is measured
// (mocker_stream_lag_seconds) and never becomes modeled time. Metrics
// report modeled seconds.
//
// # Errors
//
// Errors are OpenAI's JSON, {"error": {"message", "type", "param",
// "code"}}: 400 for a malformed body or a field of the wrong type (named),
// n other than 1, stream_options without stream, or a prompt over the
// context (vLLM's "maximum context length" wording); 404 for another
// model; 413 for a body over Options.MaxBodyBytes; 429 when the router
// finds every worker busy (a busy threshold in router_options), 503 once
// draining (P/D over HTTP adds 404 and 410, below); 500 for a request
// whose prefill hold reached its abort timeout
// before a decode took the KV, saying so. A stream that fails after its
// first token sends the error as a data line, then [DONE].
//
// # Per-worker endpoints and P/D over HTTP
//
// Workers gives every worker rank its own endpoint (`mocker serve
// --worker-ports BASE` serves rank i on BASE + i): the same OpenAI API,
// answered by that rank alone, and its own /metrics, for a router that
// picks workers itself. An aggregated rank answers whole requests. A
// prefill rank answers a request whose kv_transfer_params ask
// do_remote_decode, as vLLM's NixlConnector does: it prefills, keeps the
// KV held and returns one token and kv_transfer_params (vLLM's
// do_remote_prefill, remote_engine_id, remote_block_ids, remote_host,
// remote_port, tp_size, remote_request_id, and mocker's transfer_id and
// transfer_token, the secret its transfer server checks). A decode rank
// answers the original request carrying those params: it reserves, pulls
// the KV through the prefill's transfer server and generates (streamed or
// not). A hold no decode claims ends at kv_transfer_abort_timeout_ms.
// A trtllm cluster's ranks also take TensorRT-LLM's form, its OpenAI
// server's disaggregated_params: request_type context_only to a prefill
// rank, answered with the choice's disaggregated_params (the handout in
// encoded_opaque_state, base64) and prompt_token_ids; generation_only with
// those params to a decode rank (trtllm.go).
// While the server drains, decode ranks still take the decodes of holds
// already handed out.
// Params that do not prove a handout are refused before anything is
// applied: 400 for a missing or wrong field (named), a forged token, host
// or port, or another prompt; 404 for an unknown transfer; 410 for params
// already claimed or expired.
//
// # Metrics
//
// GET /metrics serves, for a vLLM cluster, vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
// vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
// vllm:prompt_tokens_total, vllm:generation_tokens_total,
// vllm:request_success_total{finished_reason}, vllm:num_preemptions_total,
// the histograms
// vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
// vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds
// (modeled arrival to the first pass that scheduled the request),
// vllm:request_prefill_time_seconds (the rest of the time to first token)
// and vllm:request_decode_time_seconds with vLLM's buckets, and
// vllm:cache_config_info; for an SGLang cluster sglang:num_running_reqs,
// sglang:num_queue_reqs, sglang:token_usage, sglang:cache_hit_rate,
// sglang:prompt_tokens_total, sglang:generation_tokens_total,
// sglang:cached_tokens_total, sglang:num_requests_total and its three
// latency histograms; for a TRT-LLM cluster the set Dynamo's mocker
// publishes (vLLM's gauges, num_preemptions_total and three latency
// histograms under trtllm:) and TensorRT-LLM's own names
// (trtllm_request_success_total and the trtllm_ latency histograms, with
// the label engine_type). A rank with a host KV tier adds
// mocker_kv_tier_* (TierMetricDocs). Every series has the labels
// model_name, engine (the
// data-parallel rank, as vLLM labels it) and worker (the cluster's name for
// the worker, as one endpoint serves them all). Prompt and cache counts go
// to the worker that prefilled a request, output and latencies to the one
// that finished it. mocker's own: mocker_kv_held_blocks,
// mocker_kv_holds_total{outcome}, mocker_kv_aborts_total,
// mocker_prefill_refusals_total, mocker_clock_lag_seconds and
// mocker_stream_lag_seconds.
//
// # KV events
//
// With KVEventsOptions.Endpoint (`mocker serve --kv-events
// tcp://HOST:PORT`), each worker rank, in the order of the cluster's
// Stats().Workers, binds a ZMQ PUB socket on PORT + its place and a
// replay ROUTER socket on the replay port + its place (by default right
// after the last publisher's). Every engine pass that changed the rank's
// cache is one message of three frames: the topic, the sequence number as
// 8 big-endian bytes, and a msgpack KVEventBatch encoded as vLLM's
// msgspec array-like structs ([ts, events, data_parallel_rank], events
// BlockStored, BlockRemoved and AllBlocksCleared with vLLM's field order
// and tags). Block hashes are the cluster's own, the keys its kv router
// indexes; token_ids are the stored blocks' token ids, block_size per
// hash in order (cluster.KVPass.Tokens): a prompt block's are the
// prompt's ids (Tokenize's, for text), a block of generated tokens holds
// the engine's ids for them, in [1000, 2000), the ids the block hashes
// chain over. Each event's medium is "GPU" for the GPU pool, "CPU" for a
// worker's host tier (num_g2_blocks): a block offloaded there is removed
// from GPU and stored on CPU, without parent or token ids. The copies the
// tiers below take are "DISK" (num_g3_blocks) and "EXTERNAL"
// (enable_g4_storage) events, alike. A replay request (an empty
// delimiter, then a start sequence number as 8 big-endian bytes) is
// answered with the buffered batches from there (the last
// KVEventsOptions.Buffer) and vLLM's end marker, sequence -1. Publishing never waits: a subscriber
// that falls KVEventsOptions.HWM batches behind misses the next ones. The
// sockets speak ZMTP through github.com/go-zeromq/zmq4, pure Go.
package serve
