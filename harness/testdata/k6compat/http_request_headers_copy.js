// A response's request.headers are its own: a script that writes to one
// response's changes neither another response's nor a later request.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const first = http.get(`${__ENV.BASE_URL}/echo`);
  const second = http.get(`${__ENV.BASE_URL}/echo`);
  const sent = first.json().headers['User-Agent'];
  second.request.headers['User-Agent'][0] = 'changed';
  const third = http.get(`${__ENV.BASE_URL}/echo`);
  check(first, { 'another record stands': (r) => r.request.headers['User-Agent'][0] === sent });
  check(third.json(), { 'user agent as before': (j) => j.headers['User-Agent'] === sent });
}
