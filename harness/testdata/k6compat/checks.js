// Checks: one checks sample per condition; 3 passes and 1 fail per
// iteration; the rate threshold holds.
import { check } from 'k6';
export const options = { iterations: 2, thresholds: { checks: ['rate>0.7'] } };
export default function () {
  check({ status: 200, body: 'ok' }, {
    'status is 200': (r) => r.status === 200,
    'body is ok': (r) => r.body === 'ok',
    'has no error': (r) => !r.error,
    'is slow': () => false,
  });
}
