// Helpers shared by the scenarios in scripts/ (imported by relative path,
// so copy this file along with a script that uses it).

// millis reads a Go-style duration ("500ms", "15s", "1m30s") as milliseconds.
export function millis(s) {
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 };
  let m;
  let seen = '';
  while ((m = re.exec(s)) !== null) {
    total += parseFloat(m[1]) * unit[m[2]];
    seen += m[0];
  }
  if (seen !== s || total <= 0) throw new Error(`duration ${JSON.stringify(s)}: want e.g. 15s or 1m30s`);
  return total;
}
