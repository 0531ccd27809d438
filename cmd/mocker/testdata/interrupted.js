// A run that goes on until it is interrupted: the test cancels it once the
// first iteration has logged, as a SIGINT would.
import mocker from 'k6/x/mocker';
import exec from 'k6/execution';

const cluster = mocker.cluster({
  name: 'interrupted',
  prefill: { workers: 1 },
  decode: { workers: 1, args: { max_num_seqs: 2 } },
  args: { speedup_ratio: 10, kv_transfer_abort_timeout_ms: 500 },
});

export const options = {
  scenarios: { long: { executor: 'constant-vus', vus: 4, duration: '10m', gracefulStop: '1s' } },
};

export default function () {
  cluster.generate({ prompt_tokens: 256, max_tokens: 8 });
  if (exec.vu.idInTest === 1 && exec.vu.iterationInScenario === 2) {
    console.log('three requests in');
  }
}

export function teardown() {
  cluster.drain(20000);
}
