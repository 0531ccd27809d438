// Builds a cluster but sends nothing: thresholds on the mocker metrics must
// still parse (the metrics exist from import time) and pass without samples.
import mocker from 'k6/x/mocker';

mocker.cluster({ name: 'idle', workers: 1 });

export const options = {
  iterations: 1,
  thresholds: {
    mocker_kv_aborts: ['count==0'],
    'mocker_kv_pin_duration{outcome:aborted}': ['p(95)<2000'],
    mocker_request_failed: ['rate<0.1'],
    mocker_ttft: ['p(95)<100'],
    mocker_kv_held_blocks: ['value<1'],
    mocker_prefill_rejections: ['count==0'],
  },
};

export default function () {}
