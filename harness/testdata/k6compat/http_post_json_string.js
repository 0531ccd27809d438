// A string body is sent as is, with the headers given in params.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const payload = JSON.stringify({ model: 'm', stream: false });
  const r = http.post(`${__ENV.BASE_URL}/echo`, payload, { headers: { 'Content-Type': 'application/json', 'X-Trace': 'abc' } });
  check(r.json(), {
    'body as sent': (j) => j.body === payload,
    'content type': (j) => j.headers['Content-Type'] === 'application/json',
    'custom header': (j) => j.headers['X-Trace'] === 'abc',
  });
  check(r, { 'request records the body': (r) => r.request.body === payload && r.request.method === 'POST' });
}
