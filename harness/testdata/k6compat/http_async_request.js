// http.asyncRequest returns a promise; an async default function awaits
// it, and Promise.all runs several at once.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 2, thresholds: { checks: ['rate==1'] } };
export default async function () {
  const B = __ENV.BASE_URL;
  const one = await http.asyncRequest('GET', `${B}/status/202`);
  const [a, b] = await Promise.all([http.asyncRequest('POST', `${B}/echo`, 'x'), http.asyncRequest('GET', `${B}/json`)]);
  check(null, {
    'awaited': () => one.status === 202,
    'all': () => a.json().body === 'x' && b.json('user.name') === 'ada',
  });
}
