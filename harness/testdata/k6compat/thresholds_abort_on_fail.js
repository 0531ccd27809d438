// abortOnFail: the run stops as soon as the threshold fails (exit 99),
// long before its 30s are up.
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
const errors = new Counter('errors');
export const options = {
  scenarios: { long: { executor: 'constant-vus', vus: 1, duration: '30s' } },
  thresholds: { errors: [{ threshold: 'count<1', abortOnFail: true }] },
};
export default function () { errors.add(1); sleep(0.1); }
