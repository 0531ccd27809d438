// Redirects are followed (up to 10 by default); each hop is a request of
// its own in http_reqs, and the response is the last one.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/redirect/3`);
  check(r, {
    'arrived': (r) => r.status === 200 && r.body === 'arrived',
    'final url': (r) => r.url === `${__ENV.BASE_URL}/redirect/0`,
  });
}
