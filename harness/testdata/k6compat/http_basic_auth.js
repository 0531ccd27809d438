// Credentials in the URL are sent as basic auth.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const u = __ENV.BASE_URL.replace('http://', 'http://ada:secret@');
  const r = http.get(`${u}/basic-auth/ada/secret`, { auth: 'basic' });
  check(r, { 'authorised': (r) => r.status === 200 && r.body === 'welcome ada' });
  check(http.get(`${__ENV.BASE_URL}/basic-auth/ada/secret`), { 'anonymous refused': (r) => r.status === 401 });
}
