// vus alone: shared-iterations with as many iterations as VUs.
export const options = { vus: 3 };
export default function () {}
