// abandoned.js — every iteration of a ramping-vus scenario starts a
// request with generateAsync and throws before it ends: the request left
// in flight is cancelled as its iteration ends, so none completes.
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({ engine: 'vllm', router: 'kv', disagg: false, workers: 1 });

export const options = {
  scenarios: {
    ramp: {
      executor: 'ramping-vus',
      startVUs: 2,
      stages: [{ duration: '1s', target: 4 }],
    },
  },
};

export default function () {
  cluster.generateAsync({ prompt_tokens: 256, max_tokens: 16 });
  cluster.sleep(50); // modeled ms: the iteration takes time on the clock
  throw new Error('left a request in flight');
}
