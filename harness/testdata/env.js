export const options = {
  scenarios: { s: { executor: 'per-vu-iterations', env: { SCEN: 'yes' } } },
};
if (__ENV.FOO !== 'bar') throw new Error('__ENV.FOO is ' + __ENV.FOO);
export default function () {
  if (__ENV.SCEN !== 'yes' || __ENV.FOO !== 'bar') throw new Error('scenario env missing');
}
export function handleSummary() { return { stdout: 'env ok: system=' + __ENV.MOCKER_TEST_SYSTEM + '\n' }; }
