// k6/timers, k6/data, k6/encoding and k6/crypto as k6 scripts use them.
import { check } from 'k6';
import { setTimeout as later } from 'k6/timers';
import { SharedArray } from 'k6/data';
import encoding from 'k6/encoding';
import crypto from 'k6/crypto';
const users = new SharedArray('users', () => [{ name: 'ann' }, { name: 'bob' }]);
export const options = { vus: 2, iterations: 4, thresholds: { checks: ['rate==1'] } };
export default async function () {
  const fired = await new Promise((resolve) => later(() => resolve(true), 10));
  let global = false;
  setTimeout(() => { global = true; }, 1);
  await new Promise((resolve) => setTimeout(resolve, 5));
  check(null, {
    'timers fire': () => fired && global,
    'shared array': () => users.length === 2 && users[__ITER % 2].name.length === 3,
    'base64': () => encoding.b64encode('k6') === 'azY=' && encoding.b64decode('azY=', 'std', 's') === 'k6',
    'sha256': () => crypto.sha256('k6', 'hex').length === 64,
  });
}
