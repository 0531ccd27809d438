// long_requests.js — VUS users, each sending requests that decode for
// minutes, through a cluster attached to the workers registered in NS.
// TestFault_RouterKilled kills the process running it (SIGKILL) while they
// run, and checks that the workers end its requests.
//
// Env (set by the e2e test): ETCD, NATS, NS, ARGS (the workers' engine
// args, JSON), VUS.
import mocker from 'k6/x/mocker';

const cluster = mocker.cluster({
  name: 'doomed',
  engine: 'vllm',
  router: 'round-robin',
  disagg: true,
  prefill: { workers: 1 },
  decode: { workers: 1 },
  args: JSON.parse(__ENV.ARGS),
  transport: { etcd: __ENV.ETCD.split(','), nats: __ENV.NATS, namespace: __ENV.NS },
});

export const options = { vus: parseInt(__ENV.VUS, 10), duration: '10m' };

export default function () {
  cluster.generate({ prompt_tokens: 256, max_tokens: 1000000 });
}
