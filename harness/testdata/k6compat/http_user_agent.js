// options.userAgent sets the User-Agent of every request; a header in
// params wins.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, userAgent: 'loadtest/1.0', thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    option: () => http.get(`${B}/echo`).json('headers.User-Agent') === 'loadtest/1.0',
    param: () => http.get(`${B}/echo`, { headers: { 'User-Agent': 'mine' } }).json('headers.User-Agent') === 'mine',
  });
}
