import { check } from 'k6';
export const options = { vus: 2, iterations: 4, thresholds: { checks: ['rate==1'] } };
export function setup() { return { n: 42, list: [1, 2], when: new Date(0) }; }
export default function (data) {
  check(data, {
    'setup data reaches VUs': (d) => d.n === 42 && d.list.length === 2,
    'setup data went through JSON': (d) => typeof d.when === 'string',
  });
  data.touched = true; // VUs get their own copy: teardown must not see this
}
export function teardown(data) {
  check(data, { 'teardown gets setup data': (d) => d.n === 42 && d.touched === undefined });
}
