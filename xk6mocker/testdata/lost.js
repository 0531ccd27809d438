// Requests cut off by gracefulStop: 0s beside iterations that end: the
// drain in teardown counts the cut ones in mocker_requests_lost.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({
  name: 'lost',
  prefill: { workers: 1 },
  decode: { workers: 1 },
  args: { speedup_ratio: 10, kv_transfer_abort_timeout_ms: 100000 },
});

export const options = {
  scenarios: {
    cut: { executor: 'constant-vus', vus: 2, duration: '300ms', gracefulStop: '0s', exec: 'long' },
    whole: { executor: 'shared-iterations', vus: 1, iterations: 2, exec: 'short' },
  },
};

export function long() {
  c.generate({ prompt_tokens: 128, max_tokens: 4000 });
}

export function short() {
  c.generate({ prompt_tokens: 128, max_tokens: 4 });
}

export function teardown() {
  c.drain(20000);
}
