// Metrics that got no sample: the Gauge counts as 0 (value>3 fails), the
// Trend as all zeros (p(95)<100 holds), the Rate is skipped.
import { Gauge, Rate, Trend } from 'k6/metrics';
new Gauge('queue'); new Rate('misses'); new Trend('wait');
export const options = {
  iterations: 1,
  thresholds: { queue: ['value>3'], misses: ['rate>0.9'], wait: ['p(95)<100'] },
};
export default function () {}
