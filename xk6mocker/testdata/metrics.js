// Drives a disaggregated cluster whose one decode slot and short abort
// timeout make some holds end aborted, so every mocker metric gets samples.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({
  name: 'metrics',
  router: 'round-robin',
  prefill: { workers: 2, args: { num_gpu_blocks: 512 } },
  decode: { workers: 1, args: { max_num_seqs: 1 } },
  args: { speedup_ratio: 20, kv_transfer_abort_timeout_ms: 150, kv_bytes_per_token: 131072, kv_transfer_bandwidth: 25 },
});

export const options = {
  vus: 6,
  iterations: parseInt(__ENV.ITERATIONS || '30', 10),
  thresholds: {
    mocker_kv_aborts: ['count>0'],
    'mocker_kv_pin_duration{outcome:aborted}': ['p(95)<2000'],
    mocker_requests: ['count>0'],
  },
};

export default function () {
  c.generate({ prompt_tokens: 512, max_tokens: 24 });
}

export function teardown() {
  c.drain(10000);
}
