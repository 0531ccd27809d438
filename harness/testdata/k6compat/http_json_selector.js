// Response.json() parses the body; with a selector it returns the part
// selected (undefined when there is none).
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get(`${__ENV.BASE_URL}/json`);
  check(r, {
    'whole': (r) => r.json().user.name === 'ada',
    'path': (r) => r.json('user.langs.1') === 'js',
    'count': (r) => r.json('user.langs.#') === 2,
    'missing': (r) => r.json('user.age') === undefined,
  });
}
