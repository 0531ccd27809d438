package replay

import "slices"

// AppendTokens appends a prompt of n tokens built from a trace's hash ids
// to dst: hash id h stands for blockSize tokens, each of them h folded to
// 32 bits, so equal ids give equal blocks (and the cluster's prefix cache
// and kv router see the reuse the trace records), as Dynamo's replay
// builds them. Ids beyond n tokens are ignored; tokens past the ids' blocks
// are drawn from uniq (the request's own), so they match no other
// request's.
func AppendTokens(dst []uint32, ids []uint64, n, blockSize int, uniq uint64) []uint32 {
	// Room first: the loops below then store, no append checking for it.
	start := len(dst)
	dst = slices.Grow(dst, max(0, n-start))[:max(start, n)]
	out := dst[start:]
	at := 0
	for _, h := range ids {
		if at >= len(out) {
			break
		}
		tok := idToken(h)
		blk := out[at:min(at+blockSize, len(out))]
		if len(blk) > 0 {
			// One token, then copies doubling what is filled.
			blk[0] = tok
			for k := 1; k < len(blk); k *= 2 {
				copy(blk[k:], blk[:k])
			}
		}
		at += len(blk)
	}
	base := mix(uniq)
	for j, rest := uint64(0), out[at:]; j < uint64(len(rest)); j++ {
		rest[j] = uint32(mix(base+j)) | 1<<31
	}
	return dst
}

// idToken is the token of each of hash id h's tokens: h folded to 32 bits.
func idToken(h uint64) uint32 { return uint32(h) ^ uint32(h>>32) }

// mix is splitmix64's finaliser: a well-spread 64-bit value from x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
