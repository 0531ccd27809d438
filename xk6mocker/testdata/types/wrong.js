// @ts-check
// Type errors index.d.ts must catch; `go test -tags tsc` expects tsc to
// report each marked line.
import mocker from 'k6/x/mocker';

const c = mocker.cluster({ router: 'fancy' }); // ERROR router
const tr = mocker.trace('{}', { blocksize: 512 }); // ERROR blocksize
export default function () {
  const r = c.generate({ prompt_token: 5 }); // ERROR prompt_token
  tr.play(c, (res, req) => req.lines); // ERROR lines
  return r.ttft; // ERROR ttft
}
