// A threshold on a metric nobody declared: invalid config, exit 104.
export const options = { iterations: 1, thresholds: { no_such_metric: ['count>0'] } };
export default function () {}
