// An object body is sent form-encoded, with its content type.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.post(`${__ENV.BASE_URL}/echo`, { name: 'ada lovelace', n: 3 });
  check(r.json(), {
    'form body': (j) => j.body === 'n=3&name=ada+lovelace',
    'form content type': (j) => j.headers['Content-Type'] === 'application/x-www-form-urlencoded',
    'method': (j) => j.method === 'POST',
  });
}
