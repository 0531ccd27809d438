// A gzip response is decompressed (whatever the request asked for: the
// server may encode anyway); params.compression compresses the request
// body. k6's transport asks for no compression, so a request carries no
// Accept-Encoding the script did not set.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    'response inflated': () => http.get(`${B}/gzip`).body === 'unzipped body',
    'no Accept-Encoding unless the script sets one': () => {
      const j = http.get(`${B}/echo`).json();
      return j.headers['Accept-Encoding'] === undefined;
    },
    "the script's Accept-Encoding is sent as it is": () =>
      http.get(`${B}/echo`, { headers: { 'Accept-Encoding': 'br' } }).json().headers['Accept-Encoding'] === 'br',
    'request deflated': () => {
      const j = http.post(`${B}/echo`, 'squeeze me', { compression: 'gzip' }).json();
      return j.body === 'squeeze me' && j.headers['Content-Encoding'] === 'gzip';
    },
  });
}
