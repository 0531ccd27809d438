// A crossed threshold: exit 99 once the test ends.
import { Counter } from 'k6/metrics';
const orders = new Counter('orders');
export const options = { iterations: 3, thresholds: { orders: ['count>100'] } };
export default function () { orders.add(1); }
