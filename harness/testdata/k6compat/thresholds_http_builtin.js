// Thresholds copied from an HTTP test: k6 knows these built-in metrics, so
// they evaluate (empty) and pass.
export const options = {
  iterations: 1,
  thresholds: {
    http_req_duration: ['p(95)<500'],
    http_req_failed: ['rate<0.01'],
    'http_req_duration{expected_response:true}': ['avg<300'],
  },
};
export default function () {}
