// Requests in the init context are an error (k6 makes no network calls
// there): exit 107.
import http from 'k6/http';
http.get(`${__ENV.BASE_URL}/json`);
export default function () {}
