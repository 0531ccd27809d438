// Plays the trace -e TRACE (a path) into the cluster -e CONFIG (a JSON
// path) in setup, and prints each request's TTFT and times by its trace
// line, with the mocker_requests figures, as JSON (handleSummary), for the
// Go test to compare with replay.Run. -e BLOCK_SIZE, RATE_SCALE: the
// trace's options.
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster(JSON.parse(open(__ENV.CONFIG)));
const trace = mocker.trace(open(__ENV.TRACE, 'b'), {
  block_size: parseInt(__ENV.BLOCK_SIZE || '512', 10),
  rate_scale: parseFloat(__ENV.RATE_SCALE || '1'),
});

export const options = {
  iterations: 1,
  setupTimeout: '10h',
  thresholds: { 'mocker_requests{outcome:error}': ['count==0'], mocker_ttft: ['max>0'] },
};

export function setup() {
  const byLine = {};
  const sent = trace.play(cluster, (r, req) => {
    byLine[req.line] = { outcome: r.outcome, ttft_ms: r.ttft_ms, e2e_ms: r.e2e_ms, arrived_ms: req.arrived_ms, ended_ms: req.ended_ms, session: req.session };
  });
  return { sent, requests: trace.requests, byLine };
}

export default function () {}

export function handleSummary(data) {
  return { stdout: JSON.stringify({ setup: data.setup_data, requests: data.metrics.mocker_requests }) };
}
