// A threshold on a submetric only sees samples carrying its tag.
import { Trend } from 'k6/metrics';
const latency = new Trend('latency');
export const options = {
  iterations: 2,
  thresholds: { 'latency{kind:fast}': ['max<10'], 'latency{kind:slow}': ['min>=100'] },
};
export default function () { latency.add(5, { kind: 'fast' }); latency.add(150, { kind: 'slow' }); }
