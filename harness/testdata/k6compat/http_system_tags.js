// options.systemTags: only the listed system tags are kept on samples.
import http from 'k6/http';
export const options = {
  iterations: 1,
  systemTags: ['status'],
  thresholds: { 'http_reqs{status:200}': ['count==1'], 'http_reqs{method:GET}': ['count<1'] },
};
export default function () {
  http.get(`${__ENV.BASE_URL}/json`);
}
