// Relative imports (default and named, re-exported through a nested module)
// and open() in the init context, resolved against this file.
import { check } from 'k6';
import triple, { double, name } from './lib/math.js';
import * as k6 from 'k6';

const text = open('./lib/payload.txt');
const bin = open('./lib/payload.txt', 'b');

export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };

export default function () {
  check(null, {
    'default import': () => triple(3) === 9,
    'named import': () => double(4) === 8 && name === 'math',
    'namespace import': () => typeof k6.check === 'function',
    'open text': () => text === 'hello from a file',
    'open binary': () => bin.byteLength === 17,
  });
}
