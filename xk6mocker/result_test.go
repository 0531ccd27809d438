package xk6mocker

import (
	"encoding/json"
	"testing"

	"github.com/grafana/sobek"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/cluster"
)

// TestResultObject_BehavesAsAPlainObject: the result object is built on
// read (a dynamic object) but a script cannot tell it from the plain
// object it would otherwise be: every field reads, enumerates in order,
// serialises, spreads, and takes new properties, changes and deletions.
func TestResultObject_BehavesAsAPlainObject(t *testing.T) {
	rt := sobek.New()
	var names valueCache
	r := cluster.Result{Outcome: cluster.OutcomeAborted, Error: "held past the abort timeout",
		TTFTMs: 12.5, E2EMs: 40, HoldMs: 30, OutputTokens: 3, PrefillWorker: "prefill-0",
		DecodeWorker: "decode-1", TransferID: 7, HoldStarted: true, HoldOutcome: "aborted"}
	require.NoError(t, rt.Set("res", resultObject(rt, r, &names)))
	require.NoError(t, rt.Set("done", resultObject(rt, cluster.Result{Outcome: cluster.OutcomeCompleted}, &names)))

	eval := func(src string) any {
		t.Helper()
		v, err := rt.RunString(src)
		require.NoError(t, err, src)
		return v.Export()
	}
	assert.Equal(t, "aborted", eval(`res.outcome`))
	assert.Equal(t, "held past the abort timeout", eval(`res.error`))
	assert.Nil(t, eval(`done.error`), "a completed request has a null error")
	assert.Equal(t, 12.5, eval(`res.ttft_ms`))
	assert.Equal(t, int64(7), eval(`res.transfer_id`))
	assert.Equal(t, true, eval(`res.pinned && 'pin_ms' in res && res.hasOwnProperty('decode_worker')`))
	assert.Equal(t, false, eval(`'nope' in res`))
	assert.Equal(t, "[object Object]", eval(`Object.prototype.toString.call(res)`))
	assert.Equal(t, resultKeys, toStrings(t, eval(`Object.keys(res)`)))
	assert.Equal(t, int64(len(resultKeys)), eval(`Object.keys({...res}).length`))

	var viaJSON map[string]any
	require.NoError(t, json.Unmarshal([]byte(eval(`JSON.stringify(res)`).(string)), &viaJSON))
	assert.Len(t, viaJSON, len(resultKeys))
	assert.Equal(t, "prefill-0", viaJSON["prefill_worker"])
	assert.Equal(t, 40.0, viaJSON["e2e_ms"])

	// Go's encoding/json (setup() data) sees the same fields.
	b, err := json.Marshal(rt.Get("res").Export())
	require.NoError(t, err)
	var viaGo map[string]any
	require.NoError(t, json.Unmarshal(b, &viaGo))
	assert.Equal(t, viaJSON, viaGo)

	// Changes: a new property enumerates last, a change reads back, a
	// deletion is gone, and the other fields keep their values.
	eval(`res.note = 'slow'; res.ttft_ms = 1; delete res.itl_ms`)
	assert.Equal(t, "slow", eval(`res.note`))
	assert.Equal(t, int64(1), eval(`res.ttft_ms`))
	assert.Equal(t, false, eval(`'itl_ms' in res`))
	assert.Equal(t, "decode-1", eval(`res.decode_worker`))
	keys := toStrings(t, eval(`Object.keys(res)`))
	assert.Equal(t, "note", keys[len(keys)-1])
	assert.NotContains(t, keys, "itl_ms")
	assert.Len(t, keys, len(resultKeys))

	// What a dynamic object cannot do fails loudly, and a copy can.
	_, err = rt.RunString(`Object.freeze(done)`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "non-extensible")
	assert.Equal(t, true, eval(`Object.isFrozen(Object.freeze({...done}))`))
}

func toStrings(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	require.True(t, ok, "%T", v)
	out := make([]string, len(list))
	for i, x := range list {
		out[i] = x.(string)
	}
	return out
}
