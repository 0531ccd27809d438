// shared-iterations: 10 iterations shared by 3 VUs, all completed.
export const options = {
  scenarios: { shared: { executor: 'shared-iterations', vus: 3, iterations: 10 } },
};
export default function () {}
