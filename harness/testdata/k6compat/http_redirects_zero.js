// params.redirects: 0 returns the redirection itself.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/redirect/2`, { redirects: 0 });
  check(r, {
    '302': (r) => r.status === 302,
    'location': (r) => r.headers.Location === '/redirect/1',
  });
}
