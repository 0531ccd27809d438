// http.url`` names a request by its template, so that ids in a URL do
// not make a time series each.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  for (const code of [200, 204]) {
    const r = http.get(http.url`${B}/status/${code}`);
    check(r, { 'sent to the filled url': (r) => r.url === `${B}/status/${code}` });
  }
}
