// data_received counts the bytes of responses, headers included.
import http from 'k6/http';
export const options = { iterations: 1, thresholds: { data_received: ['count>10000'], data_sent: ['count>0'] } };
export default function () {
  http.get(`${__ENV.BASE_URL}/bytes/10000`);
}
