// Imports the module without building a cluster: the summary must not get a
// KV handoff section.
import mocker from 'k6/x/mocker';

export const options = { iterations: 1 };

export default function () {
  if (typeof mocker.cluster !== 'function') throw new Error('mocker.cluster missing');
}
