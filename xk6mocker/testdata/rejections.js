// One prefill worker counts as busy while any prompt token waits to be
// prefilled: of the requests an iteration sends together, the first is
// routed and the others are refused by the prefill pool, so
// mocker_prefill_rejections gets samples.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({
  name: 'rejections',
  prefill: { workers: 1 },
  decode: { workers: 1 },
  args: { speedup_ratio: 1 },
  router_options: { active_prefill_tokens_threshold: 0 },
});

export const options = {
  vus: 1,
  iterations: 2,
  thresholds: { mocker_prefill_rejections: ['count>0'] },
};

export default async function () {
  await Promise.all([0, 1, 2, 3].map(() => c.generateAsync({ prompt_tokens: 2048, max_tokens: 2 })));
}

export function teardown() {
  c.drain(10000);
}
