package engine

import "fmt"

// TensorRT-LLM's capacity scheduler on the vLLM core.
//
// engine_type trtllm runs the vLLM model (VLLM) with TensorRT-LLM's block
// size default (32) and its capacity scheduler policy. Under
// max_utilization the core's own rules apply: a request is admitted when
// the blocks it needs now are free, and the newest running request is
// preempted (TensorRT-LLM pauses it) when the pool runs dry.
//
// Under guaranteed_no_evict, TensorRT-LLM's default, a request's whole
// life is paid for up front:
//
//   - On arrival its max_tokens is cut to the room the pool has after its
//     prompt (and to max_model_len), and the completion is then Truncated;
//     a prompt that fills the pool on its own is refused (never_fits).
//   - Each request the worker has taken in (running, or a destination
//     reserved or activated) may still take tail = ceil((prompt +
//     max_tokens) / block_size) minus the blocks it holds. A waiting
//     request is admitted only when its tail, less the prefix hits on
//     blocks some request holds, fits in the free room: num_gpu_blocks
//     minus the active blocks minus every tail. The queue head that does
//     not fit blocks the queue, as in vLLM.
//   - A destination is reserved only when its whole tail, with no credit
//     for a resident prefix, fits that room; the prefix is still reused.
//   - So the pool always has room for every admitted request to finish,
//     and nothing is ever preempted: the running phase never needs a
//     victim. Should it find the pool short all the same, the request
//     waits a pass rather than evict anything, and audit reports it.
//
// KV events, the pass shape, timing and the handoff order (source first)
// are the vLLM core's.

// tailOf is how many blocks s may still take to reach its last token.
func (v *VLLM) tailOf(s *seq) int {
	return v.blocksFor(s.prompt+s.maxOut) - len(s.blocks)
}

// noEvictRoom is the free room guaranteed_no_evict admits into: the
// blocks neither active nor set aside for a request already taken in,
// counting the slots lent to copies to the host tier as free (they come
// back when the copies land, and a request short of them waits).
// Only trtllm workers under that policy call it. The running set's part
// is the sum runTail, kept as requests join the running set, take blocks
// in a step and leave it (finished, held, cancelled or preempted), rather
// than a walk over the running set on every admission; audit checks the
// sum against the walk (runTailWalk).
func (v *VLLM) noEvictRoom() int {
	return v.total - (v.pool.active - len(v.pool.lent)) - v.destTail - v.runTail
}

// runTailWalk sums, by walking the running set, the blocks its requests
// may still take: what runTail keeps.
func (v *VLLM) runTailWalk() int {
	tail := 0
	for _, s := range v.running {
		tail += v.tailOf(s)
	}
	return tail
}

// clampOutput cuts s's max_tokens to the room after its prompt, in the
// pool and under max_model_len, as TensorRT-LLM's no-evict policy sizes a
// request. A prompt that leaves no room is refused at admission.
func (v *VLLM) clampOutput(s *seq) {
	room := min(v.total*v.bs, v.maxModelLen) - s.prompt
	if room > 0 && s.maxOut > room {
		s.maxOut = room
		s.clamped = true
	}
}

// noRoomToDecode is the refusal of a prompt that fills the pool alone.
func (v *VLLM) noRoomToDecode(s *seq) neverFit {
	return neverFit{RejectNeverFits, fmt.Sprintf("prompt of %d tokens leaves no room to decode in num_gpu_blocks %d of %d tokens "+
		"(trtllm guaranteed_no_evict sets aside prompt plus max_tokens; raise num_gpu_blocks or use max_utilization)",
		s.prompt, v.total, v.bs)}
}

// auditNoEvict checks guaranteed_no_evict's promise: the active blocks and
// every admitted request's tail fit the pool, nothing was preempted, and
// no running request found the pool short.
func (v *VLLM) auditNoEvict() error {
	tail := 0
	for i := range v.activated.len() {
		tail += v.tailOf(v.activated.at(i))
	}
	reserved := 0
	for _, s := range v.byID.All() {
		if s.state == stReserved {
			reserved += v.tailOf(s)
		}
	}
	if tail+reserved != v.destTail {
		return fmt.Errorf("no-evict: destinations may take %d more blocks, counted %d", tail+reserved, v.destTail)
	}
	if walk := v.runTailWalk(); walk != v.runTail {
		return fmt.Errorf("no-evict: running requests may take %d more blocks, counted %d", walk, v.runTail)
	}
	if room := v.noEvictRoom(); room < 0 {
		return fmt.Errorf("no-evict: %d active blocks and the admitted requests' tails exceed num_gpu_blocks %d by %d", v.pool.active, v.total, -room)
	}
	if v.preemptions > 0 || v.noEvictShort > 0 {
		return fmt.Errorf("no-evict: %d preemptions, %d running requests short of blocks", v.preemptions, v.noEvictShort)
	}
	return nil
}
