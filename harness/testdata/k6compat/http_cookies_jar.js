// Cookies a response sets are sent back by the VU's jar.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const set = http.get(`${__ENV.BASE_URL}/cookies/set?session=s1`);
  const r = http.get(`${__ENV.BASE_URL}/cookies`);
  check(null, {
    'response cookies': () => set.cookies.session[0].value === 's1',
    'sent back': () => r.json('cookies.session') === 's1',
    'jar holds it': () => http.cookieJar().cookiesForURL(`${__ENV.BASE_URL}/`).session[0] === 's1',
  });
}
