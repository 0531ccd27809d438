// A cluster with every KV tier below its GPU pools (host, disk, object
// storage), each small enough that prefix hits find blocks in all of
// them; handleSummary prints the summary data and the stats a script
// reads.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({
  name: 'tiers',
  workers: 2,
  router: 'round-robin',
  seed: 7,
  args: { block_size: 4, num_gpu_blocks: 32, num_g2_blocks: 16, num_g3_blocks: 32, enable_g4_storage: true, max_num_seqs: 4 },
});

export const options = { vus: 4, iterations: 400 };

// Prefixes drawn from 14, the first ones far more often (the square of a
// golden-ratio sequence): some come back while their blocks are still in
// the GPU pool or the host tier, some after they have left for disk or
// object storage.
export default function () {
  const n = __VU * 7 + __ITER;
  const prefix = `p${Math.floor(((n * 0.6180339887) % 1) ** 2 * 14)}`;
  c.generate({ prompt_tokens: 40 + (n % 3), max_tokens: 4, prefix, prefix_tokens: 32 });
}

export function teardown() {
  c.drain(10000);
}

export function handleSummary(data) {
  return { stdout: JSON.stringify({ mocker: data.mocker, stats: c.stats() }) };
}
