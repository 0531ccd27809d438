// cluster.sleep(ms) sleeps modeled milliseconds: at speedup_ratio 1000,
// 3000 modeled ms are 3 ms of wall time. setup returns how far the
// cluster's modeled clock moved meanwhile, and what sleep and drain said
// to values outside their ranges.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({ name: 'sleep', workers: 1, args: { speedup_ratio: 1000 } });

export const options = { iterations: 1 };

export function setup() {
  const before = c.stats().now_ms;
  c.sleep(3000);
  const after = c.stats().now_ms;
  let negative = '';
  try {
    c.sleep(-1);
  } catch (e) {
    negative = String(e);
  }
  const bounds = {};
  for (const [name, call] of [
    ['sleep 1e18', () => c.sleep(1e18)],
    ['sleep NaN', () => c.sleep(NaN)],
    ['sleep string', () => c.sleep('5')],
    ['drain 1e18', () => c.drain(1e18)],
    ['drain 0', () => c.drain(0)],
    ['drain -Infinity', () => c.drain(-Infinity)],
  ]) {
    try {
      call();
      bounds[name] = 'returned';
    } catch (e) {
      bounds[name] = String(e);
    }
  }
  return { advanced_ms: after - before, speedup_ratio: c.speedup_ratio, negative, bounds };
}

export default function () {}

export function handleSummary(data) {
  return { stdout: JSON.stringify(data.setup_data) };
}
