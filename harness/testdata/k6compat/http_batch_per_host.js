// options.batchPerHost bounds how many of a batch's requests run at once
// against one host (and options.batch overall).
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, batch: 10, batchPerHost: 2, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  const key = 'per-host-' + Date.now();
  const rs = http.batch(Array.from({ length: 6 }, () => `${B}/concurrent/${key}`));
  const peak = Number(http.get(`${B}/concurrent-peak/${key}`).body);
  check(null, {
    'all answered': () => rs.every((r) => r.status === 200),
    'at most two at once': () => peak >= 1 && peak <= 2,
  });
}
