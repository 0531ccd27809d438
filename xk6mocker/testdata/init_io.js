// Calls one cluster function, named by CALL, in the init context: as k6
// modules refuse I/O there, it must fail the test as an init error (107)
// instead of sending requests nobody measures. CALL=none calls nothing.
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({ name: 'init-io', workers: 1 });
const calls = {
  none: () => {},
  generate: () => cluster.generate({ prompt_tokens: 16, max_tokens: 2 }),
  generateAsync: () => cluster.generateAsync({ prompt_tokens: 16, max_tokens: 2 }),
  drain: () => cluster.drain(1000),
  sleep: () => cluster.sleep(1),
  stats: () => cluster.stats(),
};
calls[__ENV.CALL]();

export const options = { iterations: 1 };

export default function () {
  cluster.generate({ prompt_tokens: 16, max_tokens: 2 });
  cluster.stats();
  cluster.sleep(1);
}

export function teardown() {
  cluster.drain(5000);
}
