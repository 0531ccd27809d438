// An exception in setup: exit 107; no iteration runs, teardown is skipped.
export const options = { iterations: 2 };
export function setup() { throw new Error('setup broke'); }
export default function () { console.log('ITERATION'); }
export function teardown() { console.log('TEARDOWN'); }
