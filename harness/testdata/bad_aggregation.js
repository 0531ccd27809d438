export const options = { thresholds: { iterations: ['p(95)<10'] } };
export default function () {}
