// @ts-check
// Type-checked against harness/index.d.ts by TestDTS_NetworkScriptsTypeCheck
// (go test -tags tsc ./harness).
import http from 'k6/http';
import { get, batch, expectedStatuses } from 'k6/http';
import sse from 'k6/x/sse';
import esse from 'k6/experimental/sse';

const r = http.get('http://x/', { headers: { a: 'b' }, timeout: '1s', responseType: 'text' });
const s = r.status + r.timings.duration;
const j = r.json('a.b');
const rs = batch(['http://x/', ['POST', 'http://x/', 'body'], { method: 'GET', url: 'http://x/' }]);
const n = rs.length;
http.setResponseCallback(expectedStatuses(200, { min: 300, max: 399 }));
const jar = http.cookieJar();
jar.set('http://x/', 'a', 'b');
const p = http.asyncRequest('GET', http.url`http://x/${1}`).then((res) => res.status);
const res = sse.open('http://x/', { method: 'POST', body: '{}' }, (c) => {
  c.on('event', (e) => { if (e.data === '[DONE]') c.close(); });
  c.on('error', (e) => console.log(e.error()));
});
esse.open('http://x/', (c) => c.on('open', () => {}));
const st = res.status;
/** @type {number} */
const g = get("http://x/").status;
export { s, j, n, p, st, g };
