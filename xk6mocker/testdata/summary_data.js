// metrics.js's cluster, two of them, with a handleSummary that prints the
// summary data's mocker key as JSON.
import mocker from 'k6/x/mocker';

const opts = (name) => ({
  name,
  router: 'round-robin',
  prefill: { workers: 2, args: { num_gpu_blocks: 512 } },
  decode: { workers: 1, args: { max_num_seqs: 1 } },
  args: { speedup_ratio: 20, kv_transfer_abort_timeout_ms: 150 },
});
const a = mocker.cluster(opts('a'));
const b = mocker.cluster(opts('b'));

export const options = { vus: 6, iterations: 18 };

export default function () {
  a.generate({ prompt_tokens: 512, max_tokens: 24 });
  if (__ITER % 3 === 0) b.generate({ prompt_tokens: 64, max_tokens: 2 });
}

export function teardown() {
  a.drain(10000);
  b.drain(10000);
}

export function handleSummary(data) {
  return { stdout: JSON.stringify({ mocker: data.mocker, keys: Object.keys(data).sort() }) };
}
