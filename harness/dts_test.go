package harness

import (
	"os"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIndexDTS_DeclaresEveryNetworkExport: every named export of k6/http
// and k6/x/sse is declared in index.d.ts, and nothing more.
func TestIndexDTS_DeclaresEveryNetworkExport(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("index.d.ts")
	require.NoError(t, err)
	block := regexp.MustCompile(`(?s)declare module '([^']+)' \{(.*?)\n\}`)
	exported := regexp.MustCompile(`(?m)^  export (?:function|const) (\w+)`)
	declared := map[string][]string{}
	for _, m := range block.FindAllStringSubmatch(string(raw), -1) {
		seen := map[string]bool{}
		for _, e := range exported.FindAllStringSubmatch(m[2], -1) {
			if !seen[e[1]] {
				seen[e[1]] = true
				declared[m[1]] = append(declared[m[1]], e[1])
			}
		}
		sort.Strings(declared[m[1]])
	}
	for _, module := range []string{"k6/http", "k6/x/sse"} {
		res := runScript(t, `
import * as m from '`+module+`';
export function handleSummary() { return { stdout: Object.keys(m).filter((k) => k !== 'default').sort().join(',') }; }
export default function () {}
`, nil)
		require.NoError(t, res.err, res.stderr)
		want := ""
		for i, n := range declared[module] {
			if i > 0 {
				want += ","
			}
			want += n
		}
		assert.Equal(t, want, res.stdout, "%s: the module's exports (right) against index.d.ts (left)", module)
	}
}
