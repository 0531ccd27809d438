// Groups: group_duration per group, checks inside tagged with the group.
import { check, group } from 'k6';
export const options = {
  iterations: 3,
  thresholds: { 'group_duration{group:::login}': ['max<10000'], 'checks{group:::login}': ['rate==1'] },
  summaryTrendStats: ['avg', 'count'],
};
export default function () {
  group('login', () => { check(true, { 'logged in': (v) => v }); });
}
