// ramping-vus: from 1 to 3 VUs over 1s; every VU is initialised up front.
import { sleep } from 'k6';
export const options = {
  scenarios: { ramp: { executor: 'ramping-vus', startVUs: 1, stages: [{ duration: '1s', target: 3 }], gracefulRampDown: '0s' } },
  thresholds: { vus_max: ['value==3'], iterations: ['count>0'] },
};
export default function () { sleep(0.05); }
