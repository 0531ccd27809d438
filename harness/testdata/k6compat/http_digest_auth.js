// auth: 'digest' answers the server's 401 challenge with the credentials
// in the URL: two requests, the challenge counted as an expected
// response, so http_req_failed stays 0.
import http from 'k6/http';
import { check } from 'k6';
export const options = {
  iterations: 1,
  thresholds: { checks: ['rate==1'], http_req_failed: ['rate==0'], 'http_reqs{status:401}': ['count==1'], 'http_reqs{status:200}': ['count==1'] },
};
export default function () {
  const u = __ENV.BASE_URL.replace('http://', 'http://ada:secret@');
  const r = http.get(`${u}/digest-auth/ada/secret?x=1`, { auth: 'digest' });
  check(r, { 'authorised': (r) => r.status === 200 && r.body === 'welcome ada' });
}
