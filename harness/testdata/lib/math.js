import { double } from './nested/double.js';
export const name = 'math';
export default function triple(x) { return double(x) + x; }
export { double };
