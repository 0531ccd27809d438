// A host that resolves nowhere (.invalid is reserved for that): error_code
// 1101, no IP found.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get('http://nothing-here.invalid/');
  check(r, {
    'status 0': (r) => r.status === 0,
    'no such host': (r) => r.error_code === 1101,
  });
}
