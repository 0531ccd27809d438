// Builds the cluster described by -e CONFIG (JSON) in the init context, and
// a second one from -e SECOND when given.
import mocker from 'k6/x/mocker';

mocker.cluster(JSON.parse(__ENV.CONFIG));
if (__ENV.SECOND) {
  mocker.cluster(JSON.parse(__ENV.SECOND));
}

export default function () {}
