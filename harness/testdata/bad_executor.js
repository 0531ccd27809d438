export const options = {
  scenarios: {
    ramp: { executor: 'ramping-vus', stages: [{ duration: '1s', target: 2 }, { duration: '5x', target: 0 }] },
  },
};
export default function () {}
