// stopped_outside.js — one VU sends one request of MAX_TOKENS tokens,
// long enough that it is still in flight when the Go test stops the run
// from outside.
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({ engine: 'vllm', router: 'kv', disagg: false, workers: 1,
  args: { num_gpu_blocks: 70000 } });

export const options = {
  scenarios: {
    long: { executor: 'per-vu-iterations', vus: 1, iterations: 1, maxDuration: '1h' },
  },
};

export default function () {
  cluster.generate({ prompt_tokens: 64, max_tokens: Number(__ENV.MAX_TOKENS) });
}
