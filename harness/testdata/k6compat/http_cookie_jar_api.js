// The cookie jar API: set, cookiesForURL, delete; params.cookies and a
// jar of one's own.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  const jar = http.cookieJar();
  jar.set(B, 'a', '1');
  jar.set(B, 'b', '2');
  jar.delete(B, 'b');
  const own = new http.CookieJar();
  own.set(B, 'mine', 'x');
  check(null, {
    'set and delete': () => http.get(`${B}/cookies`).json('cookies.a') === '1' && jar.cookiesForURL(B).b === undefined,
    'params.cookies': () => http.get(`${B}/cookies`, { cookies: { extra: 'e' } }).json('cookies.extra') === 'e',
    'own jar': () => {
      const c = http.get(`${B}/cookies`, { jar: own }).json('cookies');
      return c.mine === 'x' && c.a === undefined;
    },
  });
}
