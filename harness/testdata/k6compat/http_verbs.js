// put, patch, del, options and request() send their methods; head gets
// no body.
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1, thresholds: { checks: ['rate==1'] } };
export default function () {
  const B = __ENV.BASE_URL;
  check(null, {
    put: () => http.put(`${B}/echo`, 'x').json().method === 'PUT',
    patch: () => http.patch(`${B}/echo`, 'x').json().method === 'PATCH',
    del: () => http.del(`${B}/echo`).json().method === 'DELETE',
    options: () => http.options(`${B}/echo`).json().method === 'OPTIONS',
    request: () => http.request('PUT', `${B}/echo`, 'y').json().body === 'y',
    head: () => { const r = http.head(`${B}/echo`); return r.status === 200 && r.body === ''; },
  });
}
