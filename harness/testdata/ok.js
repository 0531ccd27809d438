import { check } from 'k6';
export const options = { vus: 2, iterations: 4, thresholds: { checks: ['rate==1'], iterations: ['count==4'] } };
export default function () { check(1, { 'one is one': (v) => v === 1 }); }
