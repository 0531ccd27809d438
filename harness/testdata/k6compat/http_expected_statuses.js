// setResponseCallback(expectedStatuses(...)) decides what http_req_failed
// counts: here 404 is expected and 200 is not.
import http from 'k6/http';
export const options = { iterations: 1 };
http.setResponseCallback(http.expectedStatuses(404, { min: 500, max: 503 }));
export default function () {
  http.get(`${__ENV.BASE_URL}/status/404`);
  http.get(`${__ENV.BASE_URL}/status/502`);
  http.get(`${__ENV.BASE_URL}/status/200`);
  http.get(`${__ENV.BASE_URL}/status/504`);
}
