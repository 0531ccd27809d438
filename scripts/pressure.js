// pressure.js — an open-model ramp that drives the decode side into
// saturation, and asserts that it did.
//
// Requests arrive at a rising rate (ramping-arrival-rate) whatever the
// cluster's state, as users do. Two decode workers with four sequence slots
// each serve about 13 requests per wall second at the default speedup; past
// that rate new handoffs wait for a decode slot, the prefill side keeps
// their KV pinned meanwhile, holds get longer, held blocks pile up on the
// prefill pool, and holds that wait past the abort timeout are given up.
// The thresholds assert that saturation: decode waits long
// (mocker_decode_wait), the prefill pool fills with held KV
// (peak_held_blocks, from drain), some holds abort — and that the requests
// that do complete still get their first token in bounded time. At the
// defaults decode_wait p(95) is around 5 s, about half the holds abort, and
// the peak comes close to the 896 blocks of the prefill pool.
//
// Rates and durations are wall time (requests per wall second). The
// cluster's modeled clock runs SPEEDUP times faster, so a higher SPEEDUP
// turns the same rates into a lighter load in modeled time.
//
// Thresholds a copy must keep: 'mocker_requests{outcome:error}' and
// mocker_requests_lost at count==0, which fail the run when requests end
// in error or are lost (a worker gone mid-run, a cluster that stops
// answering), and the drain in teardown, which counts the lost ones.
//
// Run:  bin/mocker run scripts/pressure.js
//       bin/mocker run --clock virtual scripts/pressure.js   (the same result as live,
//       in a fraction of the time: for CI)
//   -e DURATION=20s       length of the ramp (script time: paced with the wall clock, or virtual)
//   -e START_RATE=5       requests per wall second at the start
//   -e PEAK_RATE=40       requests per wall second at the end of the ramp
//   -e MAX_VUS=200        VUs the executor may use for requests in flight
//   -e SPEEDUP=10         speedup_ratio: modeled ms per script ms
//   -e WAIT_P95_MS=1000   saturation: p(95) of decode wait above this (modeled ms)
//   -e HELD_MAX=400       saturation: peak held blocks above this (of 896)
//   -e TTFT_P95_MS=3000   p(95) of TTFT of completed requests below this (modeled ms)
import mocker from 'k6/x/mocker';
import { Gauge } from 'k6/metrics';
import { millis } from './lib/duration.js';

const DURATION_MS = millis(__ENV.DURATION || '20s');
const START_RATE = parseInt(__ENV.START_RATE || '5', 10);
const PEAK_RATE = parseInt(__ENV.PEAK_RATE || '40', 10);
const MAX_VUS = parseInt(__ENV.MAX_VUS || '200', 10);
const SPEEDUP = parseFloat(__ENV.SPEEDUP || '10');

// the cluster's peak held blocks, set after drain (thresholds on a gauge
// see its last value)
const peakHeld = new Gauge('peak_held_blocks');

const cluster = mocker.cluster({
  name: 'pressure',
  engine: 'vllm',
  router: 'least-loaded',
  prefill: { workers: 2, args: { num_gpu_blocks: 448 } },
  decode: { workers: 2, args: { num_gpu_blocks: 512, max_num_seqs: 4 } },
  args: {
    block_size: 16,
    speedup_ratio: SPEEDUP,
    kv_bytes_per_token: 131072,
    kv_transfer_bandwidth: 25,
    kv_transfer_abort_timeout_ms: 3000,
  },
});

export const options = {
  scenarios: {
    pressure: {
      executor: 'ramping-arrival-rate',
      startRate: START_RATE,
      timeUnit: '1s',
      preAllocatedVUs: Math.min(50, MAX_VUS),
      maxVUs: MAX_VUS,
      stages: [
        { duration: `${Math.round(DURATION_MS * 0.8)}ms`, target: PEAK_RATE },
        { duration: `${Math.round(DURATION_MS * 0.2)}ms`, target: PEAK_RATE },
      ],
      gracefulStop: '10s',
    },
  },
  thresholds: {
    // decode is saturated: handoffs wait long for a decode slot ...
    mocker_decode_wait: [`p(95)>${__ENV.WAIT_P95_MS || 1000}`],
    // ... while the prefill pool fills with KV held for them ...
    peak_held_blocks: [`value>${__ENV.HELD_MAX || 400}`],
    // ... and some holds wait past the abort timeout
    mocker_kv_aborts: ['count>0'],
    // the requests that complete still get their first token in bounded time
    'mocker_ttft{outcome:completed}': [`p(95)<${__ENV.TTFT_P95_MS || 3000}`],
    // the cluster stayed whole: no request ended in error, and every
    // request's outcome reached the metrics (keep these two in a copy)
    'mocker_requests{outcome:error}': ['count==0'],
    mocker_requests_lost: ['count==0'],
  },
};

export default function () {
  cluster.generate({
    prompt_tokens: 768 + Math.floor(Math.random() * 512),
    max_tokens: 128 + Math.floor(Math.random() * 128),
  });
}

export function teardown() {
  const s = cluster.drain(30000);
  peakHeld.add(s.peak_held_blocks);
  console.log(`peak held blocks ${s.peak_held_blocks}; ${s.pins_aborted} of ${s.pins} holds aborted; ${s.prefill_rejections} prefills refused`);
}
