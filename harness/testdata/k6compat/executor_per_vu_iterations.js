// per-vu-iterations: each of 2 VUs runs exactly 3 iterations.
export const options = {
  scenarios: { each: { executor: 'per-vu-iterations', vus: 2, iterations: 3 } },
};
export default function () {}
