import { Counter } from 'k6/metrics';
const c = new Counter('things');
export const options = { iterations: 3, thresholds: { things: ['count>100'] } };
export default function () { c.add(1); }
