import { check, sleep } from 'k6';
export const options = { iterations: 1 };
export function setup() {
  check(true, { 'setup started': (v) => v });
  console.log('SETUP RUNNING');
  sleep(60);
  console.log('SETUP ENDED');
  return { a: 1 };
}
export default function () { console.log('ITERATION RAN'); }
export function teardown() { console.log('TEARDOWN RAN'); }
