// exec.test.abort(): exit 108; the iteration that called it counts.
import exec from 'k6/execution';
export const options = { iterations: 5 };
export default function () { exec.test.abort('stop here'); }
