// params.timeout: a request that takes longer fails with error_code 1050
// and status 0, and counts in http_req_failed.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'], 'http_reqs{error_code:1050}': ['count==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/slow`, { timeout: '200ms' });
  check(r, {
    'status 0': (r) => r.status === 0,
    'timeout code': (r) => r.error_code === 1050,
    'timeout message': (r) => r.error === 'request timeout',
    'no body': (r) => r.body === null,
  });
}
