// A NaN option is invalid config: exit 104.
export const options = { vus: NaN, iterations: 2 };
export default function () {}
