// Sends the request -e REQ (JSON) from setup, where an exception ends the
// run with exit code 107 and its message.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({ name: 'req', workers: 1, args: { speedup_ratio: 100 } });

export const options = { iterations: 1 };

export function setup() {
  c.generate(JSON.parse(__ENV.REQ));
}

export default function () {}
