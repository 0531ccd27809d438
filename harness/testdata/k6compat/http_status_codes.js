// 4xx and 5xx: status set, error_code 1000+status, error empty; the
// default response callback (200-399) makes them failed requests.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'], 'http_reqs{status:404}': ['count==1'], 'http_reqs{error_code:1500}': ['count==1'] } };
export default function () {
  const nf = http.get(`${__ENV.BASE_URL}/status/404`);
  const ise = http.get(`${__ENV.BASE_URL}/status/500`);
  http.get(`${__ENV.BASE_URL}/status/204`);
  check(null, {
    '404': () => nf.status === 404 && nf.error_code === 1404,
    '500': () => ise.status === 500 && ise.error_code === 1500,
  });
}
