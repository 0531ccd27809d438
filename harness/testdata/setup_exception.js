export function setup() { throw new Error('boom in setup'); }
export default function () {}
