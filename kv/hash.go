package kv

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed Dynamo uses for block hashes.
const Seed = 1337

// LocalHash identifies a block by its tokens alone (Dynamo's LocalBlockHash).
type LocalHash uint64

// SeqHash identifies a block by its tokens and its whole prefix
// (Dynamo's sequence / external block hash).
type SeqHash uint64

// Hashes are the local and sequence hashes of a token sequence's complete
// blocks of BlockSize tokens, as BlockHashes computes them: what a caller
// that hashed a prompt once passes on, so that nobody hashes it again.
type Hashes struct {
	BlockSize int
	Locals    []LocalHash
	Seqs      []SeqHash
}

// Covers reports whether h holds the hashes of every complete block of a
// sequence of n tokens in blocks of blockSize.
func (h *Hashes) Covers(n, blockSize int) bool {
	if h == nil || h.BlockSize != blockSize || blockSize <= 0 {
		return false
	}
	return len(h.Locals) == n/blockSize && len(h.Seqs) == n/blockSize
}

// littleEndian is whether token ids in memory already are the bytes a
// block hash reads.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// HashTokens returns the local hash of one block of tokens.
func HashTokens(tokens []uint32) LocalHash {
	if littleEndian {
		// The hash is over the ids as little-endian u32, which is how
		// this host stores them: hash them in place rather than copy.
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), 4*len(tokens))
		return LocalHash(xxh3.HashSeed(b, Seed))
	}
	return hashTokensPortable(tokens)
}

// hashTokensPortable is HashTokens on any host: the ids are copied out as
// little-endian bytes first.
func hashTokensPortable(tokens []uint32) LocalHash {
	var stack [256]byte
	var buf []byte
	if n := 4 * len(tokens); n <= len(stack) {
		buf = stack[:n]
	} else {
		buf = make([]byte, n)
	}
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return LocalHash(xxh3.HashSeed(buf, Seed))
}

// ChainHash returns the sequence hash of a block whose local hash is local and
// whose predecessor has sequence hash parent.
//
// It is XXH3-64 with Seed of parent and local as 16 little-endian bytes,
// written out for that one length: the library's general entry point
// would spend more on finding the case than the case costs, and a prompt
// chains a hash per block. chainHashLib is the library's answer, which
// tests compare this one with.
func ChainHash(parent SeqHash, local LocalHash) SeqHash {
	// XXH3's path for inputs of 9 to 16 bytes: the first and last eight
	// bytes, keyed by its default secret's words at 24..56 and the seed,
	// folded by a 128-bit product and avalanched.
	const (
		key024 = 0x1f67b3b7a4a44072
		key032 = 0x78e5c0cc4ee679cb
		key040 = 0x2172ffcc7dd05a82
		key048 = 0x8e2443f7744608b8
	)
	lo := uint64(parent) ^ ((key024 ^ key032) + Seed)
	hi := uint64(local) ^ ((key040 ^ key048) - Seed)
	mh, ml := bits.Mul64(lo, hi)
	x := 16 + bits.ReverseBytes64(lo) + hi + (mh ^ ml)
	x ^= x >> 37
	x *= 0x165667919e3779f9
	x ^= x >> 32
	return SeqHash(x)
}

// chainHashLib is ChainHash through the XXH3 library.
func chainHashLib(parent SeqHash, local LocalHash) SeqHash {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[0:], uint64(parent))
	binary.LittleEndian.PutUint64(buf[8:], uint64(local))
	return SeqHash(xxh3.HashSeed(buf[:], Seed))
}

// BlockHashes returns the local and sequence hashes of every complete block of
// tokens (a partial tail block is ignored). The slices are appended to locals
// and seqs, which may be nil, so callers on hot paths can reuse storage.
func BlockHashes(tokens []uint32, blockSize int, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	if blockSize <= 0 {
		return locals, seqs
	}
	return hashBlocks(tokens, blockSize, 0, 0, locals, seqs)
}

// ExtendBlockHashes is BlockHashes for a caller that already has the
// hashes of tokens' first len(seqs) blocks in locals and seqs (those of a
// shared prefix, say): it appends those of the complete blocks after them.
// locals and seqs must be as long as each other and name no more blocks
// than tokens has.
func ExtendBlockHashes(tokens []uint32, blockSize int, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	k := len(seqs)
	if blockSize <= 0 || len(locals) != k || k > len(tokens)/blockSize {
		panic("kv: ExtendBlockHashes: the hashes given are not those of the tokens' first blocks")
	}
	var parent SeqHash
	if k > 0 {
		parent = seqs[k-1]
	}
	return hashBlocks(tokens, blockSize, k, parent, locals, seqs)
}

// hashBlocks appends the hashes of tokens' complete blocks from block
// first on, the block before it having sequence hash parent.
func hashBlocks(tokens []uint32, blockSize, first int, parent SeqHash, locals []LocalHash, seqs []SeqHash) ([]LocalHash, []SeqHash) {
	n := len(tokens)/blockSize - first
	locals = slices.Grow(locals, n)
	seqs = slices.Grow(seqs, n)
	for i := first * blockSize; i+blockSize <= len(tokens); i += blockSize {
		l := HashTokens(tokens[i : i+blockSize])
		s := SeqHash(l)
		if i > 0 {
			s = ChainHash(parent, l)
		}
		locals = append(locals, l)
		seqs = append(seqs, s)
		parent = s
	}
	return locals, seqs
}
