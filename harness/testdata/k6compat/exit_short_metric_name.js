// Metric names need 2 to 129 characters: a 1-character name is an init
// error, exit 107.
import { Counter } from 'k6/metrics';
new Counter('x');
export default function () {}
