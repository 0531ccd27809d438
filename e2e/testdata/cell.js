// cell.js — one cell of the router-mode matrix: a cluster attached to
// worker containers (transport: etcd + NATS), driven well past its decode
// capacity, with thresholds that say what the cell's router and engine must
// show. The e2e package runs it once per cell with `mocker run --clock
// virtual` and COUPLED=1; the same file runs by hand against any workers
// registered in NS (that serve no other router, when coupled):
//
//   bin/mocker run --clock virtual -e COUPLED=1 -e ROUTER=kv -e ENGINE=vllm \
//     -e ETCD=http://127.0.0.1:2379 -e NATS=nats://127.0.0.1:4222 -e NS=mocker \
//     -e ARGS='{...}' e2e/testdata/cell.js
//
// Env (all set by the e2e test):
//   ROUTER, ENGINE            the cell
//   DISAGG=1|0                prefill + decode pools, or one aggregated pool
//   ETCD, NATS, NS            where the workers are registered
//   CA                        (optional) the CA file of a NATS and an etcd that
//                             require TLS; their users and passwords come from
//                             the MOCKER_NATS_* and MOCKER_ETCD_* environment
//   COUPLED=1                 the cluster drives the workers' clocks (run it
//                             with --clock virtual: the same figures on any host)
//   ARGS                      the engine args the workers run with (JSON);
//                             the cluster must agree on block_size, speedup
//   VUS, DURATION             the pressure: VUS concurrent users for DURATION
//   PREFIXES, TAG             conversations sharing prompt prefixes; TAG keeps
//                             one cell's prefixes apart from the previous cell's
//   ABORT_MS                  the prefill's kv_transfer_abort_timeout_ms
//   KV_HITS, SPREAD           kv: hit rate above KV_HITS; least-loaded: the
//                             decode pools' active-block spread below SPREAD
import mocker from 'k6/x/mocker';
import { Counter, Rate, Trend } from 'k6/metrics';
import exec from 'k6/execution';

const ROUTER = __ENV.ROUTER;
const ENGINE = __ENV.ENGINE;
const DISAGG = __ENV.DISAGG !== '0';
const ARGS = JSON.parse(__ENV.ARGS);
const ABORT_MS = parseFloat(__ENV.ABORT_MS);
const PREFIXES = parseInt(__ENV.PREFIXES || '12', 10);

const cacheHits = new Rate('prefix_cache_hit');
// (max − min) active blocks across the decode (or aggregated) workers, as a
// share of one worker's pool, sampled after every request
const spread = new Trend('active_block_spread');
const leaks = new Counter('mocker_leaks');

const cfg = {
  name: `e2e-${__ENV.TAG}`,
  engine: ENGINE,
  router: ROUTER,
  disagg: DISAGG,
  args: ARGS,
  seed: 7,
  transport: { etcd: __ENV.ETCD.split(','), nats: __ENV.NATS, namespace: __ENV.NS, coupled: __ENV.COUPLED === '1' },
};
if (__ENV.CA) {
  // NATS and etcd require TLS (this CA) and a password, which the router
  // reads from MOCKER_NATS_USER/PASSWORD and MOCKER_ETCD_USERNAME/PASSWORD.
  cfg.transport.nats = { url: __ENV.NATS, tls: { ca: __ENV.CA } };
  cfg.transport.etcd = { endpoints: __ENV.ETCD.split(','), tls: { ca: __ENV.CA } };
}
if (DISAGG) {
  cfg.prefill = { workers: 2 };
  cfg.decode = { workers: 2 };
} else {
  cfg.workers = 2;
}
const cluster = mocker.cluster(cfg);

const thresholds = {
  mocker_requests: ['count>0'],
  'mocker_requests{outcome:completed}': ['count>0'],
  // every request ends completed, aborted or rejected: an "error" is a
  // request the distributed path lost or could not explain
  'mocker_requests{outcome:error}': ['count==0'],
  // a request whose outcome never reached the metrics (cut off, or still
  // unanswered when drain gave up) is lost: none may be
  mocker_requests_lost: ['count==0'],
  mocker_leaks: ['count==0'],
};
if (DISAGG) {
  thresholds.mocker_kv_pins = ['count>0'];
  if (ENGINE !== 'sglang') {
    // source-first (vllm, trtllm): prefills finish and hold while decode is full, and the
    // holds that wait too long end at the abort timeout, not before and
    // not much after (one engine pass)
    thresholds.mocker_kv_aborts = ['count>0'];
    thresholds['mocker_kv_pin_duration{outcome:aborted}'] = [`min>${ABORT_MS - 1}`, `max<${ABORT_MS * 1.25}`];
  } else {
    // destination-first: decode reserves before the prefill computes, so
    // a hold lasts the transfer only and none reaches the timeout
    thresholds.mocker_kv_aborts = ['count==0'];
    thresholds.mocker_kv_pin_duration = [`max<${ABORT_MS / 2}`];
  }
}
if (ROUTER === 'kv') {
  thresholds.prefix_cache_hit = [`rate>${__ENV.KV_HITS || 0.6}`];
}
if (ROUTER === 'least-loaded') {
  thresholds.active_block_spread = [`p(90)<${__ENV.SPREAD || 0.5}`];
}

export const options = {
  scenarios: {
    cell: {
      executor: 'constant-vus',
      vus: parseInt(__ENV.VUS || '24', 10),
      duration: __ENV.DURATION || '4s',
      gracefulStop: '20s',
    },
  },
  thresholds,
  tags: { router: ROUTER, engine: ENGINE },
};

export default function () {
  const conversation = Math.floor(Math.random() * PREFIXES);
  const r = cluster.generate({
    prompt_tokens: 512,
    max_tokens: 24,
    prefix: `${__ENV.TAG}-conversation-${conversation}`,
    prefix_tokens: 384,
  });
  if (r.outcome === 'completed') {
    cacheHits.add(r.cached_tokens > 0);
  }
  if (r.outcome === 'error') {
    console.error(`request error: ${r.error}`);
  }
  const pool = cluster.stats().workers.filter((w) => w.role !== 'prefill');
  if (pool.length > 1) {
    const active = pool.map((w) => w.active_blocks);
    spread.add((Math.max(...active) - Math.min(...active)) / pool[0].total_blocks);
  }
  if (r.outcome === 'rejected') {
    cluster.sleep(200); // a refused client backs off (modeled ms)
  }
}

export function teardown() {
  const s = cluster.drain(30000);
  const open = s.pins - s.pins_released - s.pins_aborted - s.pins_cancelled;
  const stuck = s.held_blocks + s.reserved_blocks + s.active_blocks + open + s.in_flight;
  console.log(`cell ${ENGINE}/${ROUTER}/${DISAGG ? 'disagg' : 'agg'}: ${s.requests} requests (${s.completed} completed, ${s.aborted} aborted, ${s.rejected} rejected, ${s.errored} errors), ${s.pins} holds (${s.pins_aborted} aborted), peak held ${s.peak_held_blocks}; after drain held ${s.held_blocks} reserved ${s.reserved_blocks} active ${s.active_blocks} open ${open}`);
  leaks.add(stuck);
  if (s.requests !== s.completed + s.aborted + s.rejected + s.errored) {
    exec.test.fail(`request conservation: ${JSON.stringify(s)}`);
  }
  if (!s.drained || stuck > 0) {
    exec.test.fail(`did not drain: ${JSON.stringify({ drained: s.drained, held: s.held_blocks, reserved: s.reserved_blocks, active: s.active_blocks, open, in_flight: s.in_flight })}`);
  }
}
