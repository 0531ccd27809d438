export const options = { iterations: 1 };
export default function () {}
export function teardown() { console.log('STUCK'); while (true) {} }
