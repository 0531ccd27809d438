// A refused connection: status 0, error_code 1212.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get('http://127.0.0.1:1/');
  check(r, {
    'status 0': (r) => r.status === 0,
    'refused code': (r) => r.error_code === 1212,
    'message names the refusal': (r) => r.error.includes('connection refused'),
  });
}
