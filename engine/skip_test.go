package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// TestRequestSkip_SameOutputsWithoutTheCoveredTokens: a worker given each
// prompt's hashes and only the tokens after the complete blocks they
// cover (Request.Skip) reports what a worker given every token reports,
// byte for byte: prompts of 1 to 50 tokens in 4-token blocks (some a
// whole number of blocks, so nothing is left after the skip), with shared
// openings, prefix hits, evictions from a pool of 24 blocks and, on a
// decode worker, reservations that find part of a prompt cached.
func TestRequestSkip_SameOutputsWithoutTheCoveredTokens(t *testing.T) {
	for _, e := range engines {
		for _, decode := range []bool{false, true} {
			name := e.name
			if decode {
				name += "/decode"
			}
			t.Run(name, func(t *testing.T) {
				a := e.args(24, func(a *Args) { a.MaxNumSeqs = intp(4) })
				if decode {
					a.WorkerType = WorkerDecode
				}
				full, skip := newWorker(t, a), newWorker(t, a)
				rng := rand.New(rand.NewPCG(9, 39))
				openings := [][]uint32{seqTokens(100, 12), seqTokens(300, 9)}
				var rf, rs record
				now := 0.0
				skipped := 0
				for id := uint64(1); id <= 60; id++ {
					p := append([]uint32(nil), openings[rng.IntN(2)]...)
					for range rng.IntN(40) - 11 {
						p = append(p, uint32(5000+rng.IntN(50000)))
					}
					if rng.IntN(4) == 0 {
						p = p[:len(p)/a.BlockSize*a.BlockSize]
					}
					if len(p) == 0 {
						p = seqTokens(7000, 1+rng.IntN(8))
					}
					h := &kv.Hashes{BlockSize: a.BlockSize}
					h.Locals, h.Seqs = kv.BlockHashes(p, a.BlockSize, nil, nil)
					k := len(h.Seqs) * a.BlockSize
					skipped += k
					reqF := Request{ID: id, Tokens: p, Hashes: h, MaxTokens: 1 + rng.IntN(20)}
					reqS := reqF
					reqS.Tokens, reqS.Skip = p[k:], k
					for _, x := range []struct {
						w   *Worker
						req Request
					}{{full, reqF}, {skip, reqS}} {
						if decode {
							require.NoError(t, x.w.Reserve(now, x.req))
						} else {
							require.NoError(t, x.w.Submit(now, x.req, Release))
						}
					}
					if decode || id%3 == 0 {
						now = drivePair(t, full, skip, &rf, &rs, now) + 1
					}
					if decode {
						require.Equal(t, full.Activate(now, id), skip.Activate(now, id))
					}
				}
				drivePair(t, full, skip, &rf, &rs, now)
				requireSameOutputs(t, &rf, &rs, "leaving out the covered tokens changes nothing")
				require.NotEmpty(t, rf.completions)
				require.Positive(t, skipped)
			})
		}
	}
}

// TestRequestSkip_RefusedWhereTheTokensAreRead: a worker refuses a prompt
// with tokens left out that it would read: without hashes, with hashes of
// another block size, or of too few blocks, with more left out than the
// hashes cover, or when it reports the token ids of the blocks it stores.
// With prefix caching off it reads no token and takes it.
func TestRequestSkip_RefusedWhereTheTokensAreRead(t *testing.T) {
	p := seqTokens(100, 10) // two blocks of 4 and 2 tokens
	hashes := func(bs, n int) *kv.Hashes {
		h := &kv.Hashes{BlockSize: bs}
		h.Locals, h.Seqs = kv.BlockHashes(p[:n], bs, nil, nil)
		return h
	}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			a := e.args(24)
			for name, req := range map[string]Request{
				"no hashes":       {ID: 1, Tokens: p[8:], Skip: 8},
				"another size":    {ID: 1, Tokens: p[8:], Skip: 8, Hashes: hashes(2, 10)},
				"too few blocks":  {ID: 1, Tokens: p[8:], Skip: 8, Hashes: hashes(4, 4)},
				"past the hashes": {ID: 1, Tokens: p[9:], Skip: 9, Hashes: hashes(4, 10)},
				"negative":        {ID: 1, Tokens: p, Skip: -1, Hashes: hashes(4, 10)},
			} {
				err := newWorker(t, a).Submit(0, req, Release)
				require.Error(t, err, name)
			}
			req := Request{ID: 1, Tokens: p[8:], Skip: 8, Hashes: hashes(4, 10), MaxTokens: 2}
			w := newWorker(t, a)
			w.RecordKVTokens()
			require.Error(t, w.Submit(0, req, Release), "a worker reporting token ids")
			require.NoError(t, newWorker(t, a).Submit(0, req, Release))
			off := a
			off.EnablePrefixCaching = false
			req.Hashes = nil
			require.NoError(t, newWorker(t, off).Submit(0, req, Release), "prefix caching off")
		})
	}
}
