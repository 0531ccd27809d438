// An exception in teardown: exit 107, after every iteration ran.
export const options = { iterations: 2 };
export default function () {}
export function teardown() { throw new Error('teardown broke'); }
