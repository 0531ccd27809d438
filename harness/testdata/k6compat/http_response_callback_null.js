// responseCallback: null in params: the request is neither failed nor
// passed, so http_req_failed gets no sample from it.
import http from 'k6/http';
export const options = { iterations: 1 };
export default function () {
  http.get(`${__ENV.BASE_URL}/status/500`, { responseCallback: null });
  http.get(`${__ENV.BASE_URL}/status/500`);
}
