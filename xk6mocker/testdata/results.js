// Runs a few requests in setup and prints their results, stats and holds as
// JSON (handleSummary), for the Go test to inspect.
import mocker from 'k6/x/mocker';

const disagg = mocker.cluster({
  name: 'disagg',
  prefill: { workers: 2 },
  decode: { workers: 2 },
  args: { speedup_ratio: 100, kv_bytes_per_token: 131072, kv_transfer_bandwidth: 25 },
});
const agg = mocker.cluster({ name: 'agg', workers: 1, args: { speedup_ratio: 100 } });
const short = mocker.cluster({ name: 'short', disagg: true, args: { speedup_ratio: 100, max_model_len: 80 } });
const ranked = mocker.cluster({
  name: 'ranked',
  router: 'round-robin',
  prefill: { workers: 1, args: { dp_size: 2 } },
  decode: { workers: 1 },
  args: { speedup_ratio: 100 },
});

export const options = { iterations: 1 };

export function setup() {
  const out = {
    disagg: disagg.generate({ prompt_tokens: 256, max_tokens: 8 }),
    agg: agg.generate({ prompt_tokens: 256, max_tokens: 8, prefix: 'shared', prefix_tokens: 128 }),
    agg_again: agg.generate({ prompt_tokens: 256, max_tokens: 8, prefix: 'shared', prefix_tokens: 128 }),
    explicit: agg.generate({ tokens: [11, 12, 13, 14, 15, 16, 17, 18], max_tokens: 2 }),
    too_long: agg.generate({ prompt_tokens: 1000000 }),
    truncated: short.generate({ prompt_tokens: 64, max_tokens: 50 }),
  };
  out.ranked = [0, 1].map(() => ranked.generate({ prompt_tokens: 64, max_tokens: 2 }));
  out.ranked_stats = ranked.drain(10000);
  short.drain(10000);
  out.stats = disagg.stats();
  out.holds = disagg.holds();
  out.drained = disagg.drain(10000);
  out.agg_drained = agg.drain(10000);
  return out;
}

export default function () {}

export function handleSummary(data) {
  return { stdout: JSON.stringify(data.setup_data) };
}
