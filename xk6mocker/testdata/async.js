// generateAsync: several requests in flight per VU, awaited together; a
// malformed request rejects its Promise with the field named.
import mocker from 'k6/x/mocker';
import { check } from 'k6';

const c = mocker.cluster({
  name: 'async',
  prefill: { workers: 1 },
  decode: { workers: 1 },
  args: { speedup_ratio: 50 },
});

export const options = {
  vus: 2,
  iterations: 4,
  thresholds: {
    mocker_requests: ['count==16'],
    'mocker_requests{outcome:completed}': ['count==16'],
    checks: ['rate==1'],
  },
};

export default async function () {
  const results = await Promise.all([0, 1, 2, 3].map((i) => c.generateAsync({ prompt_tokens: 128 + i, max_tokens: 4 })));
  check(results, {
    'four results': (rs) => rs.length === 4,
    'all completed': (rs) => rs.every((r) => r.outcome === 'completed' && r.output_tokens === 4),
  });
  let message = '';
  try {
    await c.generateAsync({ prompt_tokens: 'many' });
  } catch (e) {
    message = String(e);
  }
  check(message, { 'malformed request rejects naming the field': (m) => m.includes('prompt_tokens') });
}
