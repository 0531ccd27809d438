// Sends the oversized request -e INPUT names and prints the error it gets:
// prompt_tokens 2147483647, or a tokens array of 10M ids. The array is
// sparse, so the script itself stays small and what is measured is the
// module: filling 10M entries costs the script runtime alone about 650 MB
// and seconds of CPU before the module is called.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({ name: 'oversize', workers: 1, args: { speedup_ratio: 100 } });

export const options = { iterations: 1 };

export function setup() {
  let req;
  if (__ENV.INPUT === 'tokens') {
    req = { tokens: [] };
    req.tokens.length = 10000000;
    req.tokens[0] = 1;
  } else {
    req = { prompt_tokens: 2147483647 };
  }
  try {
    c.generate(req);
    console.error('RESULT returned');
  } catch (e) {
    console.error('RESULT ' + String(e));
  }
}

export default function () {}
