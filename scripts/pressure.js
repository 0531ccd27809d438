// pressure.js — an open-model ramp that drives the decode side into
// saturation.
//
// Requests arrive at a rising rate (ramping-arrival-rate) whatever the
// cluster's state, as users do. Once the decode pool runs at max_num_seqs,
// new handoffs wait for a decode slot: the prefill side keeps their KV
// pinned meanwhile, pins get longer, held blocks pile up on the prefill
// pool, and with enough pressure new prefills queue behind the held KV and
// time to first token climbs. Watch mocker_decode_wait, mocker_kv_pin_duration
// and mocker_kv_held_blocks grow with the rate. The thresholds bound TTFT and
// the failure rate: at the default peak they pass; raise PEAK_RATE until
// they are crossed (exit code 99) to find the saturation point.
//
// Run:  bin/mocker run scripts/pressure.js
//   -e DURATION=20s     length of the ramp
//   -e START_RATE=5     requests per second at the start
//   -e PEAK_RATE=40     requests per second at the end of the ramp
//   -e MAX_VUS=200      VUs the executor may use for requests in flight
//   -e TTFT_P95_MS=3000 threshold on p(95) of TTFT (modeled ms)
//   -e MAX_FAILED=0.5   threshold on the failure rate
import mocker from 'k6/x/mocker';

const DURATION_MS = millis(__ENV.DURATION || '20s');
const START_RATE = parseInt(__ENV.START_RATE || '5', 10);
const PEAK_RATE = parseInt(__ENV.PEAK_RATE || '40', 10);
const MAX_VUS = parseInt(__ENV.MAX_VUS || '200', 10);

const cluster = mocker.cluster({
  name: 'pressure',
  engine: 'vllm',
  router: 'least-loaded',
  prefill: { workers: 2, args: { num_gpu_blocks: 448 } },
  decode: { workers: 2, args: { num_gpu_blocks: 512, max_num_seqs: 8 } },
  args: {
    block_size: 16,
    speedup_ratio: 10,
    kv_bytes_per_token: 131072,
    kv_transfer_bandwidth: 25,
    kv_transfer_abort_timeout_ms: 3000,
  },
});

export const options = {
  scenarios: {
    pressure: {
      executor: 'ramping-arrival-rate',
      startRate: START_RATE,
      timeUnit: '1s',
      preAllocatedVUs: Math.min(50, MAX_VUS),
      maxVUs: MAX_VUS,
      stages: [
        { duration: `${Math.round(DURATION_MS * 0.8)}ms`, target: PEAK_RATE },
        { duration: `${Math.round(DURATION_MS * 0.2)}ms`, target: PEAK_RATE },
      ],
      gracefulStop: '10s',
    },
  },
  thresholds: {
    'mocker_ttft{outcome:completed}': [`p(95)<${__ENV.TTFT_P95_MS || 3000}`],
    mocker_request_failed: [`rate<${__ENV.MAX_FAILED || 0.5}`],
    mocker_kv_pins: ['count>0'],
  },
};

export default function () {
  cluster.generate({
    prompt_tokens: 768 + Math.floor(Math.random() * 512),
    max_tokens: 64 + Math.floor(Math.random() * 64),
  });
}

export function teardown() {
  const s = cluster.drain(30000);
  console.log(`peak held blocks ${s.peak_held_blocks}; ${s.pins_aborted} of ${s.pins} holds aborted; ${s.prefill_rejections} prefills refused`);
}

// millis reads a Go-style duration ("500ms", "15s", "1m30s") as milliseconds.
function millis(s) {
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 };
  let m;
  let seen = '';
  while ((m = re.exec(s)) !== null) {
    total += parseFloat(m[1]) * unit[m[2]];
    seen += m[0];
  }
  if (seen !== s || total <= 0) throw new Error(`duration ${JSON.stringify(s)}: want e.g. 15s or 1m30s`);
  return total;
}
