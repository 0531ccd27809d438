export const options = { iterations: 1 };
export default function () {}
export function handleSummary() { console.log('STUCK'); while (true) {} }
