// @ts-check
// Uses every part of the k6/x/mocker API. The tests run it, and
// `go test -tags tsc ./xk6mocker` type-checks it against index.d.ts.
import mocker, { cluster as named } from 'k6/x/mocker';

/** @type {import('k6/x/mocker').ClusterConfig} */
const config = {
  name: 'typed',
  engine: 'vllm',
  disagg: true,
  router: 'round-robin',
  prefill: { workers: 1, args: { num_gpu_blocks: 256 } },
  decode: { workers: 1, args: { max_num_seqs: 2 } },
  args: { block_size: 16, speedup_ratio: 20, kv_transfer_abort_timeout_ms: 500, max_num_batched_tokens: null },
  router_options: { busy_threshold: 0.95 },
  seed: 7,
};
const c = mocker.cluster(config);
const same = named(config);

export const options = { vus: 2, iterations: 6 };

export default async function () {
  const r = c.generate({ prompt_tokens: 128, max_tokens: 4, prefix: 'p', prefix_tokens: 64 });
  if (r.outcome !== 'completed' && typeof r.error !== 'string') {
    throw new Error('a request that did not complete says why');
  }
  const more = await Promise.all([c.generateAsync({ tokens: [1, 2, 3] }), same.generateAsync({ prompt_tokens: 32 })]);
  for (const x of more) {
    if (x.ttft_ms < 0 || x.transfer_id < 0 || x.pin_outcome === undefined) throw new Error('bad result');
  }
  c.sleep(10);
  const s = c.stats();
  if (!s.drained || s.workers.length !== 2 || s.workers[0].total_blocks <= 0) throw new Error('bad stats');
  for (const h of c.holds()) {
    if (h.prefill_worker === '' || h.blocks < 0) throw new Error('bad hold');
  }
}

export function teardown() {
  const s = c.drain(10000);
  if (!s.drained) throw new Error(s.error);
  if (c.name !== 'typed' || c.speedup_ratio !== 20 || s.held_blocks !== 0) throw new Error('bad handle');
}

/** @param {{ mocker: import('k6/x/mocker').SummaryData }} data */
export function handleSummary(data) {
  const cs = data.mocker.clusters.typed;
  const d = cs.hold_duration_ms;
  return { stdout: `typed: ${cs.requests.total} requests, ${cs.holds.started} holds, p99 ${d ? d.p99 : 0}\n` };
}
