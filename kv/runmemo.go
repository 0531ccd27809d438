package kv

import (
	"bytes"
	"slices"
	"unsafe"
)

// RunMemo is ExtendBlockHashes for prompts made of runs of equal blocks,
// as those a trace names by hash ids are (each id stands for hundreds of
// tokens, built as blocks alike): it hashes a run's block once, and keeps
// the sequence hashes of a run seen twice, so that a later prompt holding
// the same run after the same prefix copies them rather than hashing each
// block again. The sequence hashes of a run of blocks with local hash l
// whose first has sequence hash h are a function of h, l and the run's
// length (each chains the one before with l), so the memo keeps them by h
// and l, and gives the hashes ExtendBlockHashes gives, whatever the
// tokens. Memory is bounded (RunMemoBlocks hashes); the zero value is
// ready, and it is not safe for concurrent use.
type RunMemo struct {
	runs  Index[runEntry]
	keys  []SeqHash // the keys of runs, to forget them all at once
	arena []SeqHash // the runs' sequence hashes
	// seen has a bit set for each run seen, by its key's top bits, and
	// others that share theirs.
	seen [1 << seenBits / 64]uint64
}

// seenBits is the log2 of the bits RunMemo.seen has: 65,536.
const seenBits = 16

// runEntry is a run's hashes after its first, arena[off:off+n].
type runEntry struct {
	local LocalHash
	off   int32
	n     int32
}

// RunMemoBlocks bounds the sequence hashes a RunMemo keeps; past it, it
// forgets every run (a trace's runs repeat within a stretch of requests).
const RunMemoBlocks = 1 << 18

// minRun is the shortest run of equal blocks the memo keeps: a shorter
// one costs no more to hash than to look up.
const minRun = 4

// Extend is ExtendBlockHashes(tokens, blockSize, locals, seqs).
func (m *RunMemo) Extend(tokens []uint32, blockSize int, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	k := len(seqs)
	if blockSize <= 0 || len(locals) != k || k > len(tokens)/blockSize {
		panic("kv: RunMemo.Extend: the hashes given are not those of the tokens' first blocks")
	}
	n := len(tokens) / blockSize
	locals, seqs = slices.Grow(locals, n-k), slices.Grow(seqs, n-k)
	for i := k; i < n; {
		block := tokens[i*blockSize : (i+1)*blockSize]
		j := i + 1
		// The first tokens first: blocks of varied tokens differ there.
		for j < n && tokens[j*blockSize] == block[0] && sameTokens(tokens[j*blockSize:(j+1)*blockSize], block) {
			j++
		}
		l := HashTokens(block)
		if i == 0 {
			// A sequence's first block is hashed alone.
			locals, seqs = append(locals, l), append(seqs, SeqHash(l))
			i++
		}
		if j-i < minRun {
			// A short run, most often a block unlike its neighbours:
			// chained here, as hashBlocks does.
			for ; i < j; i++ {
				locals, seqs = append(locals, l), append(seqs, ChainHash(seqs[len(seqs)-1], l))
			}
			continue
		}
		locals, seqs = m.chain(l, j-i, locals, seqs)
		i = j
	}
	return locals, seqs
}

// AppendRun appends to locals and seqs, the hashes of a sequence's first
// len(seqs) blocks, those of n more blocks whose tokens are those local
// hashes to l (blocks alike, as a trace's hash id makes them): what
// ExtendBlockHashes would append for them, without their tokens.
func (m *RunMemo) AppendRun(l LocalHash, n int, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	if len(locals) != len(seqs) {
		panic("kv: RunMemo.AppendRun: locals and seqs of different lengths")
	}
	if n > 0 && len(seqs) == 0 {
		locals, seqs = append(locals, l), append(seqs, SeqHash(l))
		n--
	}
	return m.chain(l, n, locals, seqs)
}

// chain appends n blocks of local hash l after the last of seqs (there is
// one).
func (m *RunMemo) chain(l LocalHash, n int, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	if n == 0 {
		return locals, seqs
	}
	for range n {
		locals = append(locals, l)
	}
	h := ChainHash(seqs[len(seqs)-1], l)
	seqs = append(seqs, h)
	if n < minRun {
		for range n - 1 {
			h = ChainHash(h, l)
			seqs = append(seqs, h)
		}
		return locals, seqs
	}
	rest := int32(n - 1)
	// A run is kept the second time it is seen: most are a request's own,
	// seen once, and keeping them would cost more than it saves. A run
	// whose key's bit is clear was never seen, so is not kept: the lookup,
	// a cache miss in a table of thousands of runs, is spared.
	key := h
	w, bit := uint64(key)>>(64-seenBits)/64, uint64(1)<<(uint64(key)>>(64-seenBits)%64)
	seen := m.seen[w]&bit != 0
	if seen {
		if e := m.runs.Lookup(h); e != nil && e.local == l && e.n >= rest {
			return locals, append(seqs, m.arena[e.off:e.off+rest]...)
		}
	}
	start := len(seqs)
	for range rest {
		h = ChainHash(h, l)
		seqs = append(seqs, h)
	}
	if !seen {
		m.seen[w] |= bit
		return locals, seqs
	}
	if len(m.arena)+int(rest) > RunMemoBlocks {
		for _, k := range m.keys {
			m.runs.Delete(k)
		}
		m.keys, m.arena = m.keys[:0], m.arena[:0]
		m.seen = [1 << seenBits / 64]uint64{}
		m.seen[w] |= bit // the run kept below
	}
	if int(rest) > RunMemoBlocks {
		return locals, seqs
	}
	e, added := m.runs.Ref(key)
	if added {
		m.keys = append(m.keys, key)
	}
	*e = runEntry{local: l, off: int32(len(m.arena)), n: rest}
	m.arena = append(m.arena, seqs[start:]...)
	return locals, seqs
}

// sameTokens reports whether a and b, as long as each other, hold the same
// ids: a comparison of their bytes, which the runtime makes many bytes at
// a time.
func sameTokens(a, b []uint32) bool {
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), 4*len(a)),
		unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b)))
}
