package engine

// jumpTable lets a walk along a run of the vLLM pool cross many blocks at
// once: the first step of the pool's extents, the runs of blocks a trace's
// hash id fills (32 blocks of 16 tokens for a 512-token id), which a walk
// need not read one by one. A walk that has read jumpLen blocks of a run
// in a row leaves a jump from the first of them to the last; a later walk
// that stands on that first block and finds, at the jump's end, the hash
// its prompt has that many blocks on, has matched every block between: a
// block's sequence hash chains its parent's, and a run's blocks follow
// their parents' indexed copies. A jump is good while its two blocks are
// the ones it was made with (each block's generation, which an eviction
// bumps) and no run has been cut since (cuts, which every eviction that
// leaves blocks after it in their run bumps): blocks leave a run's tail
// before its middle, so the blocks between are still there.
//
// Only KVView's depth walks jump: the router asks it about every prompt,
// on every worker. A prefix walk hands every block it hits to the
// request, so reads them all. The table is made on the first question, so
// a pool nobody asks (a decode worker's) keeps none and bumps nothing.
type jumpTable struct {
	to    []jump   // by the jump's first block
	gen   []uint32 // by block: bumped when the block is evicted
	cuts  uint32
	taken uint64 // jumps taken (tests read it)
}

// jump leads from its block to block to, n blocks on in the same run,
// while the generations of both and the pool's cuts are as recorded.
type jump struct {
	to             int32
	n              int32
	genFrom, genTo uint32
	cuts           uint32
}

// jumpLen is how many blocks a jump crosses: a 512-token trace block's
// worth of 16-token blocks.
const jumpLen = 32

func newJumpTable(total int) *jumpTable {
	return &jumpTable{to: make([]jump, total), gen: make([]uint32, total)}
}

// from is the jump from block s, and whether it is good.
func (j *jumpTable) from(s int32) (jump, bool) {
	t := j.to[s]
	return t, t.n > 0 && t.genFrom == j.gen[s] && t.genTo == j.gen[t.to] && t.cuts == j.cuts
}

// set records a jump from block s to block t, n blocks on in its run.
func (j *jumpTable) set(s, t int32, n int) {
	j.to[s] = jump{to: t, n: int32(n), genFrom: j.gen[s], genTo: j.gen[t], cuts: j.cuts}
}
