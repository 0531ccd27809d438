package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvstrand/mocker/distributed/internal/plane"
	"github.com/kvstrand/mocker/engine"
)

// TestPrefillOf_TrustsOnlyAPrefillsCardUnderItsLease: a decode takes a
// transfer address from a prefill's model card as the prefill writes it,
// under the lease its instance_id names, and from nothing else: no card
// without a lease or under another, no card of a decode, and none without
// a disaggregated endpoint. The prefix it watches holds prefills' cards
// only.
func TestPrefillOf_TrustsOnlyAPrefillsCardUnderItsLease(t *testing.T) {
	const ns, id = "ns", int64(0x7a)
	card := func(role engine.WorkerType, host string, port int) []byte {
		v, err := plane.ModelValue(ns, role, id, engine.Args{BlockSize: 16, NumGPUBlocks: 64}, host, port)
		require.NoError(t, err)
		return v
	}
	kv := func(role engine.WorkerType, value []byte, lease int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(plane.MDCKey(ns, role, id)), Value: value, Lease: lease}
	}
	p, ok := prefillOf(kv(engine.WorkerPrefill, card(engine.WorkerPrefill, "10.0.0.7", 4711), id), nil)
	require.True(t, ok, "a prefill's own card")
	assert.Equal(t, prefillUp{id: id, addr: "10.0.0.7:4711"}, p)
	p, ok = prefillOf(kv(engine.WorkerPrefill, card(engine.WorkerPrefill, "::1", 4711), id), nil)
	require.True(t, ok, "an IPv6 host")
	assert.Equal(t, "[::1]:4711", p.addr)

	for name, c := range map[string]*mvccpb.KeyValue{
		"no lease":         kv(engine.WorkerPrefill, card(engine.WorkerPrefill, "10.0.0.7", 4711), 0),
		"another lease":    kv(engine.WorkerPrefill, card(engine.WorkerPrefill, "10.0.0.7", 4711), id+1),
		"a decode's card":  kv(engine.WorkerPrefill, card(engine.WorkerDecode, "10.0.0.7", 4711), id),
		"no endpoint":      kv(engine.WorkerPrefill, card(engine.WorkerPrefill, "", 0), id),
		"not a model card": kv(engine.WorkerPrefill, []byte(`{"instance_id": 122}`), id),
		"not JSON":         kv(engine.WorkerPrefill, []byte(`{`), id),
	} {
		_, ok := prefillOf(c, nil)
		assert.False(t, ok, name)
	}

	prefix := plane.MDCPrefix(ns, engine.WorkerPrefill)
	assert.True(t, strings.HasPrefix(plane.MDCKey(ns, engine.WorkerPrefill, id), prefix))
	for _, role := range []engine.WorkerType{engine.WorkerDecode, engine.WorkerAggregated} {
		assert.False(t, strings.HasPrefix(plane.MDCKey(ns, role, id), prefix), "%s card under the prefills' prefix", role)
	}
	assert.False(t, strings.HasPrefix(plane.MDCKey(ns+"x", engine.WorkerPrefill, id), prefix), "another namespace's")
}
