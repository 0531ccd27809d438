// Thresholds that hold: exit 0.
import { Trend, Counter } from 'k6/metrics';
const latency = new Trend('latency', true);
const orders = new Counter('orders');
export const options = {
  iterations: 4,
  thresholds: { latency: ['p(95)<500', 'avg<200', 'max<=400'], orders: ['count==4'] },
};
export default function () { latency.add(100); orders.add(1); }
