// options.discardResponseBodies: bodies are null unless a request asks
// for them.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, discardResponseBodies: true, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    discarded: () => http.get(`${B}/bytes/3`).body === null,
    'asked for': () => http.get(`${B}/bytes/3`, { responseType: 'text' }).body === 'xxx',
  });
}
