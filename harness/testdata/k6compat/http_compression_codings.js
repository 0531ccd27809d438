// k6 decodes response bodies in gzip, deflate, br and zstd, and in
// several codings stacked, when the script asks for them with its own
// Accept-Encoding; a body that does not decode fails the request with
// error_code 1701 and keeps its status. params.compression takes the same
// codings, comma-separated, applied in order.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  const get = (c) => http.get(`${B}/encoded?c=${c}`, { headers: { 'Accept-Encoding': c } });
  check(null, {
    'br decoded': () => get('br').body === 'encoded body',
    'zstd decoded': () => get('zstd').body === 'encoded body',
    'deflate decoded': () => get('deflate').body === 'encoded body',
    'gzip asked for by the script decoded': () => get('gzip').body === 'encoded body',
    'stacked codings decoded, the last first': () => get('gzip,br').body === 'encoded body',
    'a body that does not decode': () => {
      const r = http.get(`${B}/encoded-broken`, { headers: { 'Accept-Encoding': 'br' } });
      return r.error_code === 1701 && r.status === 200 && r.error.startsWith('error decompressing response body');
    },
    'request body in zstd then br': () => {
      const j = http.post(`${B}/echo`, 'squeeze me', { compression: 'zstd, br' }).json();
      return j.body === 'squeeze me' && j.headers['Content-Encoding'] === 'zstd, br';
    },
    'request body in deflate': () => {
      const j = http.post(`${B}/echo`, 'squeeze me', { compression: 'deflate' }).json();
      return j.body === 'squeeze me' && j.headers['Content-Encoding'] === 'deflate';
    },
  });
}
