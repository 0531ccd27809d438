// options.noVUConnectionReuse: a VU's connections are closed between
// iterations, so each iteration's first request connects; within an
// iteration they are reused.
import http from 'k6/http';
import { check } from 'k6';
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 1, iterations: 2 } }, noVUConnectionReuse: true, thresholds: { checks: ['rate==1'] } };
export default function () {
  const first = http.get(`${__ENV.BASE_URL}/json`);
  const second = http.get(`${__ENV.BASE_URL}/json`);
  check(null, {
    'first connects': () => first.timings.connecting > 0,
    'second reuses': () => second.timings.connecting === 0,
  });
}
