// Without handleSummary the text summary lists thresholds, checks and
// metrics on stdout.
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () { check(1, { 'one is one': (v) => v === 1 }); }
