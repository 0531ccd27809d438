// options.hosts resolves a name to an address of one's choosing.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, hosts: { 'api.example.test': __ENV.BASE_URL.replace('http://', '') }, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.get('http://api.example.test/echo');
  check(r, { 'reached': (r) => r.status === 200 && r.json('host') === 'api.example.test' });
}
