// options.throw: a failed request throws instead of returning.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, throw: true, thresholds: { checks: ['rate==1'] } };
export default function () {
  let caught = '';
  try {
    http.get('http://127.0.0.1:1/');
  } catch (e) {
    caught = String(e);
  }
  check(caught, { 'threw': (m) => m.includes('connection refused') });
}
