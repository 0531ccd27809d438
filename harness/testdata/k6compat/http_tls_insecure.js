// options.insecureSkipTLSVerify accepts a self-signed certificate; the
// response reports its TLS version and the handshake is timed.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, insecureSkipTLSVerify: true, thresholds: { checks: ['rate==1'], 'http_reqs{tls_version:tls1.3}': ['count==1'] } };
export default function () {
  const r = http.get(`${__ENV.TLS_URL}/json`);
  check(r, {
    'reached': (r) => r.status === 200,
    'tls version': (r) => r.tls_version === http.TLS_1_3,
    'handshake timed': (r) => r.timings.tls_handshaking > 0,
  });
}
