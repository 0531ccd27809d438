// params.tags: the name tag groups URLs, other tags are added to the
// request's samples.
import http from 'k6/http';
export const options = {
  iterations: 1,
  thresholds: { 'http_reqs{name:status-page}': ['count==3'], 'http_reqs{kind:probe}': ['count==1'], 'http_reqs{method:GET}': ['count==4'] },
};
export default function () {
  for (const code of [200, 201, 202]) {
    http.get(`${__ENV.BASE_URL}/status/${code}`, { tags: { name: 'status-page' } });
  }
  http.get(`${__ENV.BASE_URL}/json`, { tags: { kind: 'probe' } });
}
