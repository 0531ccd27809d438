// Exceptions in iterations are logged and the test goes on: exit 0, and
// the iterations still count.
import { fail } from 'k6';
export const options = { iterations: 4 };
export default function () {
  if (__ITER % 2 === 0) throw new Error('odd failure');
  fail('expected failure');
}
