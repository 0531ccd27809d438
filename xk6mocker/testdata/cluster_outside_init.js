// Calls mocker.cluster from where -e WHERE says (setup, default or
// teardown), with a new name each time, as a script that built a cluster
// per iteration would. Every call must throw; handleSummary prints how
// many did, and how many calls returned a cluster.
import mocker from 'k6/x/mocker';

export const options = { iterations: 20 };

let refused = 0;
let built = 0;
let message = '';

function build(tag) {
  try {
    mocker.cluster({ name: `${tag}-${__VU}-${__ITER}`, workers: 1 });
    built++;
  } catch (e) {
    refused++;
    message = String(e);
  }
}

export function setup() {
  if (__ENV.WHERE === 'setup') build('setup');
  return { refused, built, message };
}

export default function () {
  if (__ENV.WHERE === 'default') {
    build('iter');
    if (built > 0) throw new Error(`built ${built} clusters in iterations`);
    if (__ITER === 0 && refused === 0) throw new Error('not refused');
    console.error(message);
  }
}

export function teardown(data) {
  if (__ENV.WHERE === 'teardown') build('teardown');
  if (__ENV.WHERE !== 'default') console.error(JSON.stringify({ refused: refused + data.refused, built: built + data.built, message: message || data.message }));
}
