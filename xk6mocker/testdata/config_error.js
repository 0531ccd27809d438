// Builds the cluster described by -e CONFIG (JSON) in the init context, and
// a second one from -e SECOND when given. The strings "NaN" and "Infinity"
// stand for those numbers, which JSON cannot spell.
import mocker from 'k6/x/mocker';

function parse(text) {
  return JSON.parse(text, (k, v) => (v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : v));
}

mocker.cluster(parse(__ENV.CONFIG));
if (__ENV.SECOND) {
  mocker.cluster(parse(__ENV.SECOND));
}

export default function () {}
