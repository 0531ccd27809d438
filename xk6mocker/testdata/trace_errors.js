// Makes the mistake -e MISTAKE names with mocker.trace or trace.play, for
// the Go test to read the error it throws.
import mocker from 'k6/x/mocker';

const csv = 'timestamp,input_length,output_length\n0,100,4\n5,100,4\n';
const cluster = mocker.cluster({ workers: 1 });
const inits = {
  bad_row: () => mocker.trace('{"timestamp": 0, "input_length": 100, "output_length": 4}\n{"timestamp": 9, "input_length": -3, "output_length": 4}\n'),
  backwards: () => mocker.trace('timestamp,input_length,output_length\n10,100,4\n5,100,4\n'),
  empty: () => mocker.trace('\n\n'),
  not_data: () => mocker.trace(42),
  unknown_option: () => mocker.trace(csv, { blocksize: 512 }),
  bad_rate: () => mocker.trace(csv, { rate_scale: -1 }),
};
const trace = (inits[__ENV.MISTAKE] || (() => mocker.trace(csv)))();

export const options = { iterations: 1 };

export default function () {
  if (__ENV.MISTAKE === 'outside_init') {
    mocker.trace(csv);
  }
  if (__ENV.MISTAKE === 'not_a_cluster') {
    trace.play({ name: 'default' });
  }
  if (__ENV.MISTAKE === 'bad_callback') {
    trace.play(cluster, 'log');
  }
  trace.play(cluster);
}
