// A VU keeps its connection alive: only its first request connects.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const first = http.get(`${__ENV.BASE_URL}/json`);
  const second = http.get(`${__ENV.BASE_URL}/json`);
  check(null, {
    'first connects': () => first.timings.connecting > 0,
    'second reuses': () => second.timings.connecting === 0,
  });
}
