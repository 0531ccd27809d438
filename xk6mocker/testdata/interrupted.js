// Iterations whose long requests are cut by gracefulStop: 0s, beside a few
// that end. The harness drops samples pushed after an interruption, so the
// cut requests are not in the mocker_* metrics; the KV handoff summary
// counts them, and the drain in teardown counts them in
// mocker_requests_lost.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({
  name: 'interrupted',
  prefill: { workers: 1 },
  decode: { workers: 1 },
  args: { speedup_ratio: 10, kv_transfer_abort_timeout_ms: 100000 },
});

export const options = {
  scenarios: {
    cut: { executor: 'constant-vus', vus: 3, duration: '300ms', gracefulStop: '0s', exec: 'long' },
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
