// http.batch with an object: responses under the same keys.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, batch: 2, batchPerHost: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  const rs = http.batch({ ok: `${B}/status/200`, gone: `${B}/status/410`, js: { method: 'GET', url: `${B}/json` } });
  check(rs, {
    'keys': (rs) => rs.ok.status === 200 && rs.gone.status === 410,
    'json': (rs) => rs.js.json('n') === 3,
  });
}
