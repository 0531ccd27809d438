// options.noConnectionReuse: every request opens a connection.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, noConnectionReuse: true, thresholds: { checks: ['rate==1'] } };
export default function () {
  http.get(`${__ENV.BASE_URL}/json`);
  const second = http.get(`${__ENV.BASE_URL}/json`);
  check(second, { 'second connects too': (r) => r.timings.connecting > 0 });
}
