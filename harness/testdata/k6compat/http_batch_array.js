// http.batch with an array: responses in the order of the requests, in
// any of the three request forms.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  const rs = http.batch([`${B}/status/201`, ['POST', `${B}/echo`, 'hi'], { method: 'GET', url: `${B}/status/404` }]);
  check(rs, {
    'three responses': (rs) => rs.length === 3,
    'in order': (rs) => rs[0].status === 201 && rs[1].json().body === 'hi' && rs[2].status === 404,
  });
}
