// replay.js — replays a request trace from a script, so thresholds judge a replay.
//
// mocker.trace reads a trace (Mooncake JSONL with hash_ids, sessions, or
// CSV; gzip too: the formats `mocker replay` reads, docs/replay.md) in the
// init context from what open() returns, and trace.play sends each request
// to the cluster at its arrival time — each session's later turn its delay
// after the turn before ended — and blocks until every request has ended.
// One VU plays the whole trace in one iteration: the trace is the
// schedule, not an executor. On --clock virtual the requests arrive at
// their modeled times exactly and every TTFT equals `mocker replay`'s for
// the same trace and config, and the run takes as long as the CPU needs.
//
// A copy must keep these three thresholds and the drain in teardown, and
// bound the latencies that matter to it (TTFT_P90_MS, E2E_P99_MS here):
//   mocker_requests count==trace.requests   every request of the trace ran
//       inside the iteration: a replay cut short (the iteration ran out of
//       MAX_DURATION, or the run was stopped) leaves its last requests out
//       of the metrics, and this is what notices
//   'mocker_requests{outcome:error}' count==0  no request ended in error (a
//       worker gone mid-run, a request the cluster could not take)
//   mocker_requests_lost count==0            every request's outcome reached
//       the metrics (a cluster that stopped answering); teardown's drain
//       counts the lost ones
//
// Run:  bin/mocker run --clock virtual scripts/replay.js
//   -e TRACE=../replay/testdata/conversation.jsonl  the trace, relative to this
//                     script (open() semantics); a .gz trace is read as such
//   -e CONFIG=cluster.json  the cluster config (JSON: what `mocker replay
//                     --config` and mocker.cluster take); default 2 prefill +
//                     2 decode vLLM workers, kv router
//   -e BLOCK_SIZE=512 tokens per hash id (--trace-block-size)
//   -e RATE_SCALE=1   divide arrival times by this: 2 sends twice as fast
//   -e MAX_REQUESTS=0 send at most this many requests (0: all)
//   -e SPEEDUP=1      speedup_ratio: modeled ms per script ms (on the paced
//                     clock, how much faster than the wall clock the replay runs)
//   -e MAX_DURATION=10h  how long the replay may take, in script time (modeled
//                     time / SPEEDUP); on --clock virtual it costs no wall time
//   -e TTFT_P90_MS=2000  the TTFT p90 bound (modeled ms)
//   -e E2E_P99_MS=20000  the end-to-end p99 bound (modeled ms)
import mocker from 'k6/x/mocker';

const config = __ENV.CONFIG ? JSON.parse(open(__ENV.CONFIG)) : {
  engine: 'vllm',
  router: 'kv',
  prefill: { workers: 2 },
  decode: { workers: 2, args: { max_num_seqs: 16 } },
  args: { num_gpu_blocks: 4096, kv_transfer_abort_timeout_ms: 2000 },
};
config.args = Object.assign({}, config.args, { speedup_ratio: parseFloat(__ENV.SPEEDUP || '1') });
const cluster = mocker.cluster(config);

const tracePath = __ENV.TRACE || '../replay/testdata/conversation.jsonl';
const trace = mocker.trace(open(tracePath, 'b'), {
  block_size: parseInt(__ENV.BLOCK_SIZE || '512', 10),
  rate_scale: parseFloat(__ENV.RATE_SCALE || '1'),
  max_requests: parseInt(__ENV.MAX_REQUESTS || '0', 10),
});

export const options = {
  scenarios: {
    // The iteration is the whole replay: MAX_DURATION bounds it, with no
    // grace after (a replay cut short fails the mocker_requests threshold).
    replay: { executor: 'per-vu-iterations', vus: 1, iterations: 1, maxDuration: __ENV.MAX_DURATION || '10h', gracefulStop: '0s' },
  },
  thresholds: {
    mocker_requests: [`count==${trace.requests}`],
    'mocker_requests{outcome:error}': ['count==0'],
    mocker_requests_lost: ['count==0'],
    mocker_ttft: [`p(90)<${__ENV.TTFT_P90_MS || 2000}`],
    mocker_e2e: [`p(99)<${__ENV.E2E_P99_MS || 20000}`],
  },
};

export default function () {
  trace.play(cluster);
}

export function teardown() {
  cluster.drain(30000);
}
