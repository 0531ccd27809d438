// http.get: a 200 response with its status line, protocol, headers and
// timings; http_reqs counts it and http_req_failed is 0.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'], http_req_failed: ['rate==0'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/json`);
  check(r, {
    'status 200': (r) => r.status === 200,
    'status_text': (r) => r.status_text === '200 OK',
    'proto': (r) => r.proto === 'HTTP/1.1',
    'content type header': (r) => r.headers['Content-Type'] === 'application/json',
    'no error': (r) => r.error === '' && r.error_code === 0,
    'timings add up': (r) => Math.abs(r.timings.duration - (r.timings.sending + r.timings.waiting + r.timings.receiving)) < 1e-6,
    'url': (r) => r.url === `${__ENV.BASE_URL}/json`,
  });
}
