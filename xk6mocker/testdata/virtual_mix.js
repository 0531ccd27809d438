// On the virtual clock, VUs blocked in every way at once: in sleep(), in
// cluster.generate, awaiting cluster.generateAsync, in cluster.sleep and
// waiting for their next arrival-rate start. Time moves only when all of
// them are blocked, and the run neither deadlocks nor depends on the host.
import mocker from 'k6/x/mocker';
import { sleep, check } from 'k6';

const c = mocker.cluster({
  name: 'mix',
  engine: 'vllm',
  prefill: { workers: 2, args: { num_gpu_blocks: 512 } },
  decode: { workers: 1, args: { num_gpu_blocks: 192, max_num_seqs: 4 } },
  args: { block_size: 16, speedup_ratio: 10, kv_transfer_abort_timeout_ms: 800 },
});

export const options = {
  scenarios: {
    sleepers: { executor: 'constant-vus', vus: 2, duration: '5s', exec: 'sleeper' },
    blocking: { executor: 'constant-vus', vus: 6, duration: '5s', exec: 'blocking' },
    promises: { executor: 'per-vu-iterations', vus: 2, iterations: 5, exec: 'promises' },
    paced: { executor: 'constant-arrival-rate', rate: 8, timeUnit: '1s', duration: '5s', preAllocatedVUs: 20, exec: 'paced' },
  },
  thresholds: {
    'iterations{scenario:sleepers}': ['count==10'],
    'iterations{scenario:promises}': ['count==10'],
    'iterations{scenario:paced}': ['count==40'],
    mocker_kv_pins: ['count>0'],
    checks: ['rate==1'],
  },
};

export function sleeper() { sleep(1); }

export function blocking() {
  const r = c.generate({ prompt_tokens: 700, max_tokens: 24, prefix: `p${__VU % 3}`, prefix_tokens: 256 });
  check(r, { 'an outcome': (x) => ['completed', 'aborted', 'rejected'].includes(x.outcome) });
  c.sleep(50);
}

export async function promises() {
  const rs = await Promise.all([0, 1, 2].map((i) => c.generateAsync({ prompt_tokens: 300 + i, max_tokens: 8 })));
  check(rs, { 'three results': (x) => x.length === 3 });
  sleep(0.1);
}

export function paced() {
  c.generate({ prompt_tokens: 200, max_tokens: 4 });
}

export function teardown() {
  const s = c.drain(60000);
  check(s, { drained: (x) => x.held_blocks === 0 && x.active_blocks === 0 });
}
