package cluster_test

import (
	"fmt"

	"github.com/kvstrand/mocker/cluster"
)

// A whole disaggregated cluster on virtual time: 200 requests arriving
// every 100 modeled ms at a decode worker with two sequence slots, each
// taken by a reservation, so holds queue behind the decodes and some wait
// past the 1 s abort timeout. The run takes milliseconds of CPU and gives
// the same figures on every machine.
func ExampleRunVirtual() {
	cfg := cluster.Config{
		Disagg: true,
		Args:   map[string]any{"kv_transfer_abort_timeout_ms": 1000},
		Decode: cluster.PoolConfig{Args: map[string]any{"max_num_seqs": 2, "reserve_takes_slot": true}},
	}
	arrivals := make([]cluster.Arrival, 200)
	for i := range arrivals {
		arrivals[i] = cluster.Arrival{AtMs: 100 * float64(i), Request: cluster.Request{PromptTokens: 256, MaxTokens: 32}}
	}
	run, err := cluster.RunVirtual(cfg, arrivals, cluster.VirtualOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := run.Stats
	fmt.Printf("requests %d: completed %d, aborted %d\n", s.Requests, s.Completed, s.Aborted)
	fmt.Printf("holds %d: transferred %d, aborted at the timeout %d\n", s.Holds, s.HoldsReleased, s.HoldsAborted)
	fmt.Printf("left held %d blocks\n", s.HeldBlocks)
	// Output:
	// requests 200: completed 173, aborted 27
	// holds 200: transferred 173, aborted at the timeout 27
	// left held 0 blocks
}
