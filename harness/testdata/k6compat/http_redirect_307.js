// A 307 repeats the request with its method and body.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.post(`${__ENV.BASE_URL}/redirect307`, 'kept');
  check(r.json(), { 'method and body kept': (j) => j.method === 'POST' && j.body === 'kept' });
}
