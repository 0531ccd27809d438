// exec.test.fail(): the test runs to its end, then exits 110.
import exec from 'k6/execution';
export const options = { iterations: 3 };
export default function () { if (__ITER === 0) exec.test.fail('bad data'); }
