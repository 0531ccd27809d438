// http.file values make the body multipart/form-data.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const r = http.post(`${__ENV.BASE_URL}/echo`, { note: 'hi', upload: http.file('file bytes', 'a.txt', 'text/plain') });
  check(r.json(), {
    'multipart': (j) => j.headers['Content-Type'].startsWith('multipart/form-data; boundary='),
    'file part': (j) => j.body.includes('filename="a.txt"') && j.body.includes('file bytes'),
    'field part': (j) => j.body.includes('name="note"'),
  });
}
