// responseType: binary gives an ArrayBuffer, none gives null; text is a
// string.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    binary: () => http.get(`${B}/bytes/5`, { responseType: 'binary' }).body.byteLength === 5,
    none: () => http.get(`${B}/bytes/5`, { responseType: 'none' }).body === null,
    text: () => http.get(`${B}/bytes/5`).body === 'xxxxx',
  });
}
