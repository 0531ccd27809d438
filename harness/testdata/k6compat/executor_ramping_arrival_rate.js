// ramping-arrival-rate: the rate climbs from 0 to 10/s over 1s, so the
// area under it, 5 iterations, start.
export const options = {
  scenarios: { climb: { executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s', stages: [{ duration: '1s', target: 10 }], preAllocatedVUs: 10 } },
};
export default function () {}
