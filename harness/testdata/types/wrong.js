// @ts-check
// Each line marked ERROR must fail the type check against index.d.ts.
import http from 'k6/http';
import sse from 'k6/x/sse';

const a = http.get('http://x/').status.length; // ERROR
const b = http.get('http://x/', { responseType: 'json' }); // ERROR
const c = sse.open('http://x/', {}, (cl) => cl.on('message', () => {})); // ERROR
const d = http.batch('http://x/'); // ERROR
export { a, b, c, d };
