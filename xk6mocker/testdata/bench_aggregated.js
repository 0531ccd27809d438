// bench_aggregated.js — scripts/quickstart.js's load (a ramp of VUs, each
// request 1024 prompt tokens, half of them a shared prefix, 48 out) on
// four aggregated vLLM workers behind the kv router: the aggregated
// variant BenchmarkVirtualAggregated measures the harness with.
import mocker from 'k6/x/mocker';
import { check } from 'k6';
import { millis } from '../../scripts/lib/duration.js';

const DURATION_MS = millis(__ENV.DURATION || '16s');
const VUS = parseInt(__ENV.VUS || '20', 10);

const cluster = mocker.cluster({
  engine: 'vllm',
  router: 'kv',
  disagg: false,
  workers: 4,
  args: { block_size: 16, num_gpu_blocks: 1024, max_num_seqs: 6, speedup_ratio: 10 },
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
    mocker_request_failed: ['rate<0.35'],
    'mocker_ttft{outcome:completed}': ['p(95)<5000'],
    checks: ['rate>0.75'],
  },
};

export default function () {
  const r = cluster.generate({
    prompt_tokens: 1024,
    max_tokens: 48,
    prefix: `user-${__VU % 6}`,
    prefix_tokens: 512,
  });
  check(r, {
    completed: (x) => x.outcome === 'completed',
    'one worker': (x) => x.outcome !== 'completed' || x.prefill_worker === x.decode_worker,
  });
}

export function teardown() {
  cluster.drain(30000);
}
