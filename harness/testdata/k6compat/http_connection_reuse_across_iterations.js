// By default a VU keeps its connection from one iteration to the next.
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 1, iterations: 2 } }, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/json`);
  if (exec.vu.iterationInScenario === 1) {
    check(r, { 'the second iteration reuses the connection': (r) => r.timings.connecting === 0 });
  }
}
