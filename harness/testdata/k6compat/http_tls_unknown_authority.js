// Without insecureSkipTLSVerify a self-signed certificate fails the
// request: error_code 1310, unknown authority.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.TLS_URL}/json`);
  check(r, {
    'status 0': (r) => r.status === 0,
    'unknown authority': (r) => r.error_code === 1310,
  });
}
