// constant-vus: 2 VUs loop for 1s; vus_max reports the 2 VUs.
import { sleep } from 'k6';
export const options = {
  scenarios: { steady: { executor: 'constant-vus', vus: 2, duration: '1s' } },
  thresholds: { iterations: ['count>2'], vus_max: ['value==2'] },
};
export default function () { sleep(0.1); }
