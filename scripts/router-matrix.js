// router-matrix.js — one workload, any router mode and engine: the script a
// CI matrix runs once per cell.
//
// Requests arrive at a constant rate (constant-arrival-rate) from a set of
// conversations that share long prompt prefixes, on a disaggregated cluster
// of two prefill and two decode workers. The thresholds are the ones every
// cell must meet whatever the mode: few failures, a bounded TTFT, KV handed
// off from prefill to decode; the kv router must also route most requests to
// a prefill worker that has their prefix cached (cache hits). Compare cells
// through their summaries, or --summary-export them.
//
// Run:  bin/mocker run -e ROUTER=kv -e ENGINE=vllm scripts/router-matrix.js
//   -e ROUTER=round-robin|kv|least-loaded|random   (default kv)
//   -e ENGINE=vllm|sglang                          (default vllm)
//   -e DURATION=10s    how long requests arrive
//   -e RATE=20         requests per second
//   -e PREFIXES=12     distinct conversations (shared prefixes)
//
// e.g. a GitHub Actions matrix:
//   strategy: { matrix: { router: [round-robin, kv, least-loaded, random], engine: [vllm, sglang] } }
//   run: bin/mocker run -q -e ROUTER=${{ matrix.router }} -e ENGINE=${{ matrix.engine }} scripts/router-matrix.js
import mocker from 'k6/x/mocker';
import { Rate } from 'k6/metrics';
import { check } from 'k6';

const ROUTER = __ENV.ROUTER || 'kv';
const ENGINE = __ENV.ENGINE || 'vllm';
const RATE = parseInt(__ENV.RATE || '20', 10);
const PREFIXES = parseInt(__ENV.PREFIXES || '12', 10);

// share of requests whose prefill found part of the prompt in its cache
const cacheHits = new Rate('prefix_cache_hit');

const cluster = mocker.cluster({
  name: `matrix-${ENGINE}-${ROUTER}`,
  engine: ENGINE,
  router: ROUTER,
  prefill: { workers: 2, args: { num_gpu_blocks: 1024 } },
  decode: { workers: 2, args: { num_gpu_blocks: 1024, max_num_seqs: 16 } },
  args: {
    block_size: 16,
    speedup_ratio: 10,
    kv_bytes_per_token: 131072,
    kv_transfer_bandwidth: 25,
    kv_transfer_abort_timeout_ms: 5000,
  },
  seed: 7,
});

const thresholds = {
  mocker_request_failed: ['rate<0.05'],
  'mocker_ttft{outcome:completed}': ['p(95)<2000'],
  mocker_kv_pins: ['count>0'],
  mocker_kv_transfer_duration: ['p(95)<50'], // 1024 tokens × 128 KiB at 25 GB/s ≈ 5 ms
  checks: ['rate>0.95'],
};
if (ROUTER === 'kv') {
  // only the kv router sees the prefix caches; other modes hit by luck
  thresholds.prefix_cache_hit = ['rate>0.5'];
}

export const options = {
  scenarios: {
    matrix: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: __ENV.DURATION || '10s',
      preAllocatedVUs: 20,
      maxVUs: 100,
      gracefulStop: '10s',
    },
  },
  thresholds,
  tags: { router: ROUTER, engine: ENGINE },
};

export default function () {
  const conversation = Math.floor(Math.random() * PREFIXES);
  const r = cluster.generate({
    prompt_tokens: 1024,
    max_tokens: 32,
    prefix: `conversation-${conversation}`,
    prefix_tokens: 768,
  });
  cacheHits.add(r.cached_tokens > 0);
  check(r, {
    completed: (x) => x.outcome === 'completed',
    'handed off': (x) => x.outcome !== 'completed' || (x.transfer_id > 0 && x.prefill_worker !== x.decode_worker),
  });
}

export function teardown() {
  const s = cluster.drain(30000);
  console.log(`${ENGINE}/${ROUTER}: ${s.completed}/${s.requests} completed, ${s.pins} holds, ${s.pins_aborted} aborted, held after drain ${s.held_blocks}`);
}
