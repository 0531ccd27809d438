// A gzip response is decompressed; params.compression compresses the
// request body.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    'response inflated': () => http.get(`${B}/gzip`).body === 'unzipped body',
    'request deflated': () => {
      const j = http.post(`${B}/echo`, 'squeeze me', { compression: 'gzip' }).json();
      return j.body === 'squeeze me' && j.headers['Content-Encoding'] === 'gzip';
    },
  });
}
