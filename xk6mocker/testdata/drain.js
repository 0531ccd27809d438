// Leaves work in flight at the end (holds that only an abort timeout ends),
// then drains in teardown and records what is left in gauges.
import mocker from 'k6/x/mocker';
import { Gauge } from 'k6/metrics';

const left = new Gauge('left_after_drain');
const drained = new Gauge('drained_ok');

const c = mocker.cluster({
  name: 'drain',
  prefill: { workers: 1 },
  decode: { workers: 1, args: { max_num_seqs: 1 } },
  args: { speedup_ratio: 20, kv_transfer_abort_timeout_ms: 300 },
});

export const options = {
  vus: 4,
  iterations: 12,
  thresholds: { left_after_drain: ['value==0'], drained_ok: ['value==1'] },
};

export default function () {
  c.generate({ prompt_tokens: 256, max_tokens: 16 });
}

export function teardown() {
  const s = c.drain(20000);
  left.add(s.held_blocks + s.reserved_blocks + s.active_blocks + s.in_flight);
  drained.add(s.drained ? 1 : 0);
}
