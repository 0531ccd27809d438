// quickstart.js — a first look at the KV handoff of disaggregated serving.
//
// Two vLLM prefill workers hand their prompts' KV to two small decode
// workers, behind the kv router, while a short ramp of VUs (ramping-vus)
// comes and goes. Every request pins KV on a prefill worker until a decode
// worker has room for it; when decode is full, pins last longer, and the
// ones that wait past the abort timeout are given up: at the defaults
// about one request in five (16 s of script time). The peak of 20 users
// keeps decode clearly past saturation, so that share holds on the wall
// clock too, where a closed loop near the edge of saturation (16 users or
// so) can tip either way with the host's timing; on the virtual clock the
// result is the same on every run. The end-of-test summary
// shows the latencies, the pins, transfers and aborts, and a "KV handoff"
// section with the longest holds (prefill → decode).
//
// Thresholds a copy must keep: 'mocker_requests{outcome:error}' and
// mocker_requests_lost at count==0, which fail the run when requests end
// in error or are lost (a worker gone mid-run, a cluster that stops
// answering), and the drain in teardown, which counts the lost ones.
//
// Run:  bin/mocker run scripts/quickstart.js      (live; `make run` runs it on virtual time)
//       bin/mocker run --clock virtual scripts/quickstart.js   (the same result as live,
//       in a fraction of the time: for CI)
//   -e DURATION=16s   length of the ramp (up, steady, down; script time)
//   -e VUS=20         peak number of VUs
//   -e ABORT_MS=1000  kv_transfer_abort_timeout_ms (modeled ms)
//   -e SPEEDUP=10     speedup_ratio: modeled ms per script ms
//   -e THINK_MS=0     each user's think time between requests (modeled ms)
import mocker from 'k6/x/mocker';
import { check } from 'k6';
import { millis } from './lib/duration.js';

const DURATION_MS = millis(__ENV.DURATION || '16s');
const VUS = parseInt(__ENV.VUS || '20', 10);
const THINK_MS = parseFloat(__ENV.THINK_MS || '0');

const cluster = mocker.cluster({
  engine: 'vllm',
  router: 'kv',
  prefill: { workers: 2, args: { num_gpu_blocks: 1024 } },
  decode: { workers: 2, args: { num_gpu_blocks: 384, max_num_seqs: 6 } },
  args: {
    block_size: 16,
    speedup_ratio: parseFloat(__ENV.SPEEDUP || '10'),
    kv_bytes_per_token: 131072, // 128 KiB per token
    kv_transfer_bandwidth: 25, // GB/s
    kv_transfer_abort_timeout_ms: parseInt(__ENV.ABORT_MS || '1000', 10),
  },
});

export const options = {
  scenarios: {
    ramp: {
      executor: 'ramping-vus',
      startVUs: 1,
      stages: [
        { duration: `${Math.round(DURATION_MS * 0.35)}ms`, target: VUS },
        { duration: `${Math.round(DURATION_MS * 0.45)}ms`, target: VUS },
        { duration: `${Math.round(DURATION_MS * 0.2)}ms`, target: 0 },
      ],
      gracefulRampDown: '5s',
    },
  },
  thresholds: {
    // most requests complete even though decode is the bottleneck
    mocker_request_failed: ['rate<0.35'],
    // the handoff happened: KV was pinned and transferred
    mocker_kv_pins: ['count>0'],
    'mocker_kv_pin_duration{outcome:transferred}': ['p(50)<1500'],
    // modeled latencies of the requests that completed
    'mocker_ttft{outcome:completed}': ['p(95)<1000'],
    checks: ['rate>0.75'],
    // the cluster stayed whole: no request ended in error, and every
    // request's outcome reached the metrics (keep these two in a copy)
    'mocker_requests{outcome:error}': ['count==0'],
    mocker_requests_lost: ['count==0'],
  },
};

export default function () {
  const r = cluster.generate({
    prompt_tokens: 1024,
    max_tokens: 48,
    prefix: `user-${__VU % 6}`, // six conversations share their first 512 tokens
    prefix_tokens: 512,
  });
  check(r, {
    completed: (x) => x.outcome === 'completed',
    'handed off between two workers': (x) => x.outcome !== 'completed' || x.prefill_worker !== x.decode_worker,
  });
  cluster.sleep(THINK_MS); // modeled time: the same think time at any SPEEDUP
}

export function teardown() {
  const s = cluster.drain(30000);
  console.log(`drained: ${s.requests} requests, ${s.pins} holds (${s.pins_released} transferred, ${s.pins_aborted} aborted), ${s.held_blocks} blocks still held`);
}
