// router-matrix.js — one workload, any router mode and engine: the script a
// CI matrix runs once per cell, with thresholds that tell the modes apart.
//
// Requests arrive at a constant rate (constant-arrival-rate) from PREFIXES
// conversations that share long prompt prefixes (768 of 1024 tokens, 48
// blocks), on a disaggregated cluster of four prefill and two decode
// workers. Each prefill worker's pool (384 blocks) caches about a quarter of
// the default 24 prefixes, the four pools together all of them. The kv
// router sends each conversation back to the worker that has its prefix
// cached, so most prefills are cache hits (about 80% at the defaults, the
// first request of each conversation being a miss); round-robin, random
// and least-loaded spread every conversation over all four workers, whose
// pools keep evicting each other's prefixes, and hit about 20% of the time.
// Every cell asserts few failures, a bounded TTFT and the KV handoff; the
// cache-hit threshold depends on the mode: high for kv, a lower bound only
// for the others. Compare cells through their summaries, or
// --summary-export them.
//
// Thresholds a copy must keep: 'mocker_requests{outcome:error}' and
// mocker_requests_lost at count==0, which fail the run when requests end
// in error or are lost (a worker gone mid-run, a cluster that stops
// answering), and the drain in teardown, which counts the lost ones.
//
// Run:  bin/mocker run -e ROUTER=kv -e ENGINE=vllm scripts/router-matrix.js
//       bin/mocker run --clock virtual scripts/router-matrix.js   (the same result as live,
//       in a fraction of the time: for CI)
//   -e ROUTER=round-robin|kv|least-loaded|random   (default kv)
//   -e ENGINE=vllm|sglang|trtllm                   (default vllm)
//   -e DURATION=10s    how long requests arrive (script time: paced with the wall clock, or virtual)
//   -e RATE=20         requests per wall second
//   -e PREFIXES=24     distinct conversations (shared prefixes)
//   -e SPEEDUP=10      speedup_ratio: modeled ms per script ms
//   -e KV_HITS=0.6     kv: the cache-hit rate must be above this
//   -e OTHER_HITS=0.05 other modes: the cache-hit rate must be above this
//
// e.g. a GitHub Actions matrix:
//   strategy: { matrix: { router: [round-robin, kv, least-loaded, random], engine: [vllm, sglang, trtllm] } }
//   run: bin/mocker run -q -e ROUTER=${{ matrix.router }} -e ENGINE=${{ matrix.engine }} scripts/router-matrix.js
import mocker from 'k6/x/mocker';
import { Rate } from 'k6/metrics';
import { check } from 'k6';

const ROUTER = __ENV.ROUTER || 'kv';
const ENGINE = __ENV.ENGINE || 'vllm';
const RATE = parseInt(__ENV.RATE || '20', 10);
const PREFIXES = parseInt(__ENV.PREFIXES || '24', 10);
const SPEEDUP = parseFloat(__ENV.SPEEDUP || '10');

// share of requests whose prefill found part of the prompt in its cache
const cacheHits = new Rate('prefix_cache_hit');

const cluster = mocker.cluster({
  name: `matrix-${ENGINE}-${ROUTER}`,
  engine: ENGINE,
  router: ROUTER,
  prefill: { workers: 4, args: { num_gpu_blocks: 384 } },
  decode: { workers: 2, args: { num_gpu_blocks: 1024, max_num_seqs: 16 } },
  args: {
    block_size: 16,
    speedup_ratio: SPEEDUP,
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
  // the cluster stayed whole: no request ended in error, and every
  // request's outcome reached the metrics (keep these two in a copy)
  'mocker_requests{outcome:error}': ['count==0'],
  mocker_requests_lost: ['count==0'],
};
// Only the kv router sees the prefix caches; the other modes hit when the
// worker they happen to pick still has the prefix.
thresholds.prefix_cache_hit = ROUTER === 'kv' ? [`rate>${__ENV.KV_HITS || 0.6}`] : [`rate>${__ENV.OTHER_HITS || 0.05}`];

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
