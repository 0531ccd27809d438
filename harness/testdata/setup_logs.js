export const options = { iterations: 1 };
export function setup() { console.log('SETUP RAN'); }
export default function () {}
