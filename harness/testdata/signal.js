import { sleep } from 'k6';
export const options = { vus: 2, duration: '1h' };
export function setup() { return { a: 1 }; }
export default function () {
  if (__ITER === 0 && __VU === 1) console.log('SCENARIOS RUNNING');
  sleep(0.05);
}
export function teardown(d) { console.log('TEARDOWN START'); sleep(0.3); console.log('TEARDOWN END ' + d.a); }
