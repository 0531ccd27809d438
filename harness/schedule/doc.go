// Package schedule holds the executors' plans as pure functions of time:
// how many VUs a ramping-vus scenario wants at a given moment and when each
// iteration of an arrival-rate scenario starts. The harness's executors
// wait on their clock and ask the plan what to do next; the plan itself
// never sleeps, so it is tested without a runtime or a clock.
package schedule
