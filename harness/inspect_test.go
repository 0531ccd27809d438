package harness

import (
	"testing"

	"github.com/grafana/sobek"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInspect_AsK6ConsolePrints pins console output to the util.inspect
// style k6 prints objects in (on one line).
func TestInspect_AsK6ConsolePrints(t *testing.T) {
	t.Parallel()
	tests := []struct{ js, want string }{
		{`'plain string'`, `plain string`},
		{`42`, `42`},
		{`-0`, `-0`},
		{`1.5`, `1.5`},
		{`true`, `true`},
		{`null`, `null`},
		{`undefined`, `undefined`},
		{`10n`, `10n`},
		{`({ a: 1, b: [ 1, 2 ] })`, `{ a: 1, b: [ 1, 2 ] }`},
		{`({})`, `{}`},
		{`[]`, `[]`},
		{`({ s: 'x', 'needs-quotes': "it's", n: null, u: undefined })`, `{ s: 'x', 'needs-quotes': "it's", n: null, u: undefined }`},
		{`({ nested: { deeper: { deepest: { gone: 1 } } } })`, `{ nested: { deeper: { deepest: [Object] } } }`},
		{`[[[[1]]]]`, `[ [ [ [Array] ] ] ]`},
		{`({ f: function named() {}, g: () => 1 })`, `{ f: [Function: named], g: [Function: g] }`},
		{`(function () {})`, `[Function (anonymous)]`},
		{`new Date(Date.UTC(2024, 0, 2))`, `2024-01-02T00:00:00.000Z`},
		{`new Map([['a', 1]])`, `Map(1) { 'a' => 1 }`},
		{`new Set([1, 'two'])`, `Set(2) { 1, 'two' }`},
		{`(() => { class Point { constructor() { this.x = 1; } } return new Point(); })()`, `Point { x: 1 }`},
		{`(() => { const o = { a: 1 }; o.self = o; return o; })()`, `{ a: 1, self: [Circular] }`},
		{`new Error('boom')`, `Error: boom`},
		{`/re/g`, `/re/g`},
		{`'line\nbreak'`, "line\nbreak"},
		{`({ s: 'line\nbreak' })`, `{ s: 'line\nbreak' }`},
	}
	for _, tc := range tests {
		t.Run(tc.js, func(t *testing.T) {
			t.Parallel()
			rt := sobek.New()
			v, err := rt.RunString(tc.js)
			require.NoError(t, err)
			assert.Equal(t, tc.want, inspect(rt, v))
		})
	}
}

func TestRun_ConsoleLogPrintsObjectsAsK6(t *testing.T) {
	t.Parallel()
	res := runScript(t, `
export const options = { iterations: 1 };
export default function () { console.log('obj:', { a: 1, b: [1, 2] }, 'text'); }
`, nil)
	require.NoError(t, res.err)
	assert.Contains(t, res.stderr, "obj: { a: 1, b: [ 1, 2 ] } text  source=console")
}
