export const options = { thresholds: { no_such_metric: ['count>0'] } };
export default function () {}
