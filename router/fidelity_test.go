package router_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kvstrand/mocker/router"
)

// TestFidelity_DecisionScenarioUnderDynamoCompat replays Dynamo's
// test_router_decisions (see TestRouter_DecisionScenario) with the router's
// dynamo_compat: ACDF still goes to a (longest prefix), but the ACG cost
// tie is drawn at random, as Dynamo main draws it, so over many seeds both
// workers win it; mocker's default always gives it to b, the smaller tree.
func TestFidelity_DecisionScenarioUnderDynamoCompat(t *testing.T) {
	t.Parallel()
	seen := map[uint64]int{}
	for seed := range uint64(64) {
		r := newRouter(t, func(c *router.Config) {
			c.DynamoCompat = true
			c.Seed = seed
		}, agg(workerA, workerB)...)
		store(t, r, workerA, "AB", 0)
		store(t, r, workerA, "ACD", 1)
		store(t, r, workerB, "ACE", 0)
		assert.Equal(t, workerA, route(t, r, "acdf", "ACDF"), "longest prefix")
		store(t, r, workerA, "ACDF", 3)
		prefillDoneByID(r, "acdf")
		freeByID(r, "acdf")
		seen[route(t, r, "acg", "ACG")]++
	}
	assert.Positive(t, seen[workerA], "a wins some ties: %v", seen)
	assert.Positive(t, seen[workerB], "b wins some ties: %v", seen)
}
