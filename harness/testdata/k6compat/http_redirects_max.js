// options.maxRedirects bounds the hops; past it the redirection is
// returned (with a warning).
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, maxRedirects: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/redirect/3`);
  check(r, { 'stopped at the second hop': (r) => r.status === 302 && r.url === `${__ENV.BASE_URL}/redirect/2` });
}
