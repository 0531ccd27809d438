// setup() data reaches VUs through JSON: undefined keeps its key as null,
// a Date becomes a string, functions are not allowed (so none here).
import { check } from 'k6';
export const options = { iterations: 2, thresholds: { checks: ['rate==1'] } };
export function setup() { return { n: 1, gone: undefined, when: new Date(0) }; }
export default function (data) {
  check(data, {
    'number kept': (d) => d.n === 1,
    'undefined became null': (d) => 'gone' in d && d.gone === null,
    'date became a string': (d) => typeof d.when === 'string' && d.when.startsWith('1970-01-01T'),
  });
}
