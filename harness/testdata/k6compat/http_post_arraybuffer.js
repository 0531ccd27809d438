// An ArrayBuffer body is sent as its bytes.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const buf = new Uint8Array([104, 105, 33]).buffer;
  const r = http.post(`${__ENV.BASE_URL}/echo`, buf);
  check(r.json(), { 'bytes sent': (j) => j.body === 'hi!' });
}
