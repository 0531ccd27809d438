// cascade.js — reproduces a KV stranding cascade, and proves it ends cleanly.
//
// One decode worker with two sequence slots serves two prefill workers, and
// each handoff reservation holds one of those slots until its request
// completes (reserve_takes_slot, mocker's former rule; Dynamo and vLLM
// reserve KV only, and at this load strand far less: see docs/fidelity.md).
// Decode saturates at once; every finished prefill then pins its KV while it
// waits for a decode slot, held blocks fill the prefill pools, the router
// marks full prefill workers busy and refuses new prefills, and the abort
// timeout gives up the holds that waited too long, which frees the pools
// for the next wave. The thresholds assert that the cascade happened
// (holds, aborts, refusals) and that nothing leaked: teardown drains the
// cluster and counts a leak for every block still held, reserved or active
// and for every hold that did not end.
//
// Aborts need ABORT_MS below the longest wait for a decode slot. The busy
// threshold bounds that queue: at the defaults no hold waits much more than
// about 1250 modeled ms, so any ABORT_MS ≤ 1000 shows aborts (the default
// does), while above about 1300 every hold ends transferred and the
// mocker_kv_aborts threshold is crossed: the refusals alone then carry the
// cascade.
//
// Thresholds a copy must keep: 'mocker_requests{outcome:error}' and
// mocker_requests_lost at count==0, which fail the run when requests end
// in error or are lost (a worker gone mid-run, a cluster that stops
// answering), and the drain in teardown, which counts the lost ones.
//
// Run:  bin/mocker run scripts/cascade.js
//       bin/mocker run --clock virtual scripts/cascade.js   (the same result as live,
//       in a fraction of the time: for CI)
//   -e DURATION=10s   how long the VUs push (script time: paced with the wall clock, or virtual)
//   -e VUS=24         concurrent users
//   -e ABORT_MS=1000  kv_transfer_abort_timeout_ms (modeled ms; aborts need ≤ 1000)
//   -e SPEEDUP=10     speedup_ratio: modeled ms per script ms
//   -e BACKOFF_MS=500 a refused client's back-off before it retries (modeled ms)
//   -e ENGINE=vllm    the scheduler model: vllm, or trtllm (the vLLM core under
//                     TensorRT-LLM's guaranteed_no_evict: it cascades alike,
//                     every request set aside to its last token)
//   -e OFFLOAD=2048   give each prefill worker a host (G2) offload tier of
//                     this many blocks (num_g2_blocks), and let the prompts
//                     share their first 768 tokens among 12 documents: more
//                     than a prefill pool holds, so a document evicted from
//                     the GPU pool comes back from the tier (cached_tokens)
//                     at bandwidth_g2_to_g1_gbps rather than being recomputed
//   -e DISK=2048      with OFFLOAD, a disk (G3) tier of this many blocks below
//                     each host tier (num_g3_blocks): with a host tier smaller
//                     than the 12 documents (OFFLOAD=256), a document the host
//                     tier dropped is staged back from disk at
//                     bandwidth_g3_to_g2_gbps
//   -e TRANSPORT=local  run the workers as `mocker worker` child processes over
//                     an embedded etcd and NATS (the distributed path)
//   -e TRANSPORT=coupled  the same, the cluster driving the workers' clocks:
//                     under --clock virtual, the in-process figures exactly
import mocker from 'k6/x/mocker';
import { Counter } from 'k6/metrics';
import exec from 'k6/execution';

const leaks = new Counter('mocker_leaks');
const ENGINE = __ENV.ENGINE || 'vllm';
const OFFLOAD = parseInt(__ENV.OFFLOAD || '0', 10);
const DISK = parseInt(__ENV.DISK || '0', 10);
const onboarded = new Counter('cascade_prefix_hits');

const cluster = mocker.cluster({
  name: 'cascade',
  engine: ENGINE,
  router: 'round-robin',
  // five held 1024-token prompts fill a prefill pool; trtllm sets aside
  // each prefill's output token too, a 65th block, so its pool has five
  // more for the same five holds
  prefill: {
    workers: 2,
    args: Object.assign(
      { num_gpu_blocks: ENGINE === 'trtllm' ? 325 : 320 },
      OFFLOAD > 0 ? { num_g2_blocks: OFFLOAD, bandwidth_g2_to_g1_gbps: 14 } : {},
      DISK > 0 ? { num_g3_blocks: DISK, bandwidth_g3_to_g2_gbps: 7 } : {},
    ),
  },
  decode: { workers: 1, args: { num_gpu_blocks: 4096, max_num_seqs: 2, reserve_takes_slot: true } },
  args: {
    block_size: 16,
    speedup_ratio: parseFloat(__ENV.SPEEDUP || '10'),
    kv_bytes_per_token: 131072,
    kv_transfer_bandwidth: 25,
    kv_transfer_abort_timeout_ms: parseInt(__ENV.ABORT_MS || '1000', 10),
  },
  // a worker whose pool (held KV included) is over 85% full is busy: when
  // every prefill worker is, new requests are refused — the cascade's edge
  router_options: { busy_threshold: 0.85 },
  transport: { local: 'local', coupled: { local: true, coupled: true } }[__ENV.TRANSPORT],
});

export const options = {
  scenarios: {
    cascade: {
      executor: 'constant-vus',
      vus: parseInt(__ENV.VUS || '24', 10),
      duration: __ENV.DURATION || '10s',
      gracefulStop: '10s',
    },
  },
  thresholds: {
    mocker_kv_pins: ['count>0'], // KV was pinned waiting for decode
    mocker_kv_aborts: ['count>0'], // and some pins ran into the abort timeout
    // and their requests ended aborted. A count, not a Trend's min: with no
    // aborted sample a min threshold has nothing to cross and passes.
    'mocker_requests{outcome:aborted}': ['count>0'],
    mocker_prefill_rejections: ['count>0'], // full prefill pools refused work
    mocker_leaks: ['count==0'], // nothing stays held after drain
    // the cluster stayed whole: no request ended in error, and every
    // request's outcome reached the metrics (keep these two in a copy)
    'mocker_requests{outcome:error}': ['count==0'],
    mocker_requests_lost: ['count==0'],
    // with the host tier, prompts found their shared document cached
    ...(OFFLOAD > 0 ? { cascade_prefix_hits: ['count>0'] } : {}),
  },
};

export default function () {
  const req = { prompt_tokens: 1024, max_tokens: 32 };
  if (OFFLOAD > 0) {
    req.prefix = `doc-${exec.scenario.iterationInTest % 12}`;
    req.prefix_tokens = 768;
  }
  const r = cluster.generate(req);
  if (r.cached_tokens > 0) {
    onboarded.add(1);
  }
  if (r.outcome === 'rejected') {
    // refused while the prefill pools were full of held KV: back off as a
    // client would, rather than spin on refusals; the back-off is modeled
    // time, so it does not change with SPEEDUP
    cluster.sleep(parseFloat(__ENV.BACKOFF_MS || '500'));
  }
}

export function teardown() {
  const s = cluster.drain(30000);
  // A hold also ends when its request is cut short (an interrupted run):
  // cancelled, not open.
  const open = s.pins - s.pins_released - s.pins_aborted - s.pins_cancelled;
  const stuck = s.held_blocks + s.reserved_blocks + s.active_blocks + open + s.in_flight;
  console.log(`cascade: ${s.pins} holds, ${s.pins_aborted} aborted, ${s.pins_cancelled} cancelled, ${s.prefill_rejections} prefills refused, peak ${s.peak_held_blocks} held blocks; after drain: held ${s.held_blocks}, reserved ${s.reserved_blocks}, active ${s.active_blocks}, open holds ${open}`);
  leaks.add(stuck);
  if (OFFLOAD > 0) {
    // both prefill workers have a tier, and prompts came back from them
    console.log(`cascade: host tiers hold ${s.g2_blocks} of ${s.g2_capacity} blocks, ${s.g2_onboarded} onboarded`);
    if (s.g2_capacity !== 2 * OFFLOAD || s.g2_onboarded === 0) {
      exec.test.fail(`host offload tiers not in use: ${JSON.stringify({ g2_capacity: s.g2_capacity, g2_onboarded: s.g2_onboarded })}`);
    }
  }
  if (DISK > 0) {
    // both prefill workers have a disk tier, and documents came back from it
    console.log(`cascade: disk tiers hold ${s.g3_blocks} of ${s.g3_capacity} blocks, ${s.g3_onboarded} onboarded`);
    if (s.g3_capacity !== 2 * DISK || s.g3_onboarded === 0) {
      exec.test.fail(`disk offload tiers not in use: ${JSON.stringify({ g3_capacity: s.g3_capacity, g3_onboarded: s.g3_onboarded })}`);
    }
  }
  if (!s.drained || stuck > 0) {
    exec.test.fail(`cluster did not drain cleanly: ${JSON.stringify({ drained: s.drained, held: s.held_blocks, reserved: s.reserved_blocks, active: s.active_blocks, open_holds: open })}`);
  }
}
