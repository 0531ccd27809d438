export const options = { iterations: 1 };
export default function () {}
export function handleSummary(data) {
  return { stdout: 'noColor=' + data.options.noColor + ' isStdOutTTY=' + data.state.isStdOutTTY + '\n' };
}
