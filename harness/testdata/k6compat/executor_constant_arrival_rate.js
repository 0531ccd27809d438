// constant-arrival-rate: 10 starts per second for 1s, one every 100ms.
export const options = {
  scenarios: { open: { executor: 'constant-arrival-rate', rate: 10, timeUnit: '1s', duration: '1s', preAllocatedVUs: 10 } },
};
export default function () {}
