// The VU's cookies are cleared between iterations.
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 1, iterations: 2 } }, thresholds: { checks: ['rate==1'] } };
export default function () {
  const seen = http.get(`${__ENV.BASE_URL}/cookies`).json('cookies.round');
  if (exec.vu.iterationInScenario === 0) {
    check(seen, { 'first iteration starts empty': (v) => v === undefined });
    http.get(`${__ENV.BASE_URL}/cookies/set?round=one`);
  } else {
    check(seen, { 'second iteration starts empty too': (v) => v === undefined });
  }
}
