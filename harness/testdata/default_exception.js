export const options = { iterations: 2 };
export default function () { throw new Error('boom in default'); }
