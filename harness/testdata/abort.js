import exec from 'k6/execution';
import { sleep } from 'k6';
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '10s' } } };
export default function () {
  if (exec.vu.idInTest === 1 && exec.vu.iterationInScenario === 2) exec.test.abort('enough');
  sleep(0.01);
}
