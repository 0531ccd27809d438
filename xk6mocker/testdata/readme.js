import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({
  engine: 'vllm', disagg: true, router: 'kv',
  prefill: { workers: 2, args: { num_gpu_blocks: 1024 } },
  decode:  { workers: 2, args: { num_gpu_blocks: 1024, max_num_seqs: 8 } },
  args: { block_size: 16, speedup_ratio: 20, kv_transfer_abort_timeout_ms: 2000 },
});

export const options = {
  vus: 16,
  duration: '10s',
  thresholds: {
    mocker_request_failed: ['rate<0.01'],
    mocker_kv_aborts: ['count==0'],
    'mocker_kv_pin_duration{outcome:transferred}': ['p(95)<500'],
    'mocker_ttft{outcome:completed}': ['p(95)<1000'],
    // keep these two in any script: they fail the run on a broken cluster
    'mocker_requests{outcome:error}': ['count==0'],
    mocker_requests_lost: ['count==0'],
  },
};

export default function () {
  cluster.generate({ prompt_tokens: 1024, max_tokens: 64,
                     prefix: `user-${__VU % 8}`, prefix_tokens: 512 });
  cluster.sleep(500); // think time: 500 modeled ms, whatever the speedup
}

export function teardown() { cluster.drain(30000); }
