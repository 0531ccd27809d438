package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// TestRecordKVTokens_IdsOfTheStoredBlocks: a worker told to record the
// token ids of the blocks it stores reports, for every Stored block, the 4
// ids whose chained hash is the block's hash: a prompt block's are the
// prompt's, a generated block's the ids Tokens reports. Its outputs are
// otherwise those of the same worker without them, byte for byte, through
// prefix hits and evictions (a pool of 24 blocks for prompts of up to 40
// tokens with shared openings).
func TestRecordKVTokens_IdsOfTheStoredBlocks(t *testing.T) {
	cases := append([]engineCase{}, engines...)
	cases = append(cases, engineCase{"sglang-pessimistic", sglangArgs})
	for _, e := range cases {
		t.Run(e.name, func(t *testing.T) {
			a := e.args(24, func(a *Args) { a.MaxNumSeqs = intp(4) })
			plain, with := newWorker(t, a), newWorker(t, a)
			with.RecordKVTokens()
			rng := rand.New(rand.NewPCG(5, 5))
			openings := [][]uint32{seqTokens(100, 12), seqTokens(300, 9)}
			prompts := map[uint64][]uint32{}
			var rp, rw record
			now := 0.0
			for id := uint64(1); id <= 40; id++ {
				p := append([]uint32(nil), openings[rng.IntN(2)]...)
				for range 1 + rng.IntN(28) {
					p = append(p, uint32(5000+rng.IntN(50000)))
				}
				prompts[id] = p
				req := Request{ID: id, Tokens: p, MaxTokens: 1 + rng.IntN(20)}
				require.NoError(t, plain.Submit(now, req, Release))
				require.NoError(t, with.Submit(now, req, Release))
				if id%3 == 0 {
					now = drivePair(t, plain, with, &rp, &rw, now) + 1
				}
			}
			drivePair(t, plain, with, &rp, &rw, now)
			requireSameOutputs(t, &rp, &rw, "recording token ids changes nothing else")
			assert.Empty(t, rp.kvTokens, "a worker not told records none")

			// Each request's whole sequence: its prompt, then the ids it
			// generated.
			seqs := map[uint64][]uint32{}
			for id, p := range prompts {
				seqs[id] = append([]uint32(nil), p...)
			}
			for _, tk := range rw.tokens {
				s := seqs[tk.RequestID]
				require.Len(t, s, len(prompts[tk.RequestID])+tk.Index, "tokens come in order")
				seqs[tk.RequestID] = append(s, tk.Token)
			}
			// The blocks of every sequence, by hash.
			blockOf := map[kv.SeqHash][]uint32{}
			for _, s := range seqs {
				_, hs := kv.BlockHashes(s, 4, nil, nil)
				for j, h := range hs {
					blockOf[h] = s[j*4 : (j+1)*4]
				}
			}
			toks := rw.kvTokens
			blocks, generated := 0, 0
			for _, ev := range rw.kvEvents {
				for _, b := range ev.Blocks {
					require.GreaterOrEqual(t, len(toks), 4)
					want, ok := blockOf[b.Hash]
					require.True(t, ok, "block %x is a block of some request's sequence", b.Hash)
					assert.Equal(t, want, toks[:4], "block %x", b.Hash)
					if toks[3] >= 1000 && toks[3] < 2000 {
						generated++
					}
					toks = toks[4:]
					blocks++
				}
			}
			assert.Empty(t, toks, "4 ids per stored block, no more")
			assert.Positive(t, blocks)
			assert.Positive(t, generated, "blocks of generated tokens were stored")
			removed := 0
			for _, ev := range rw.kvEvents {
				removed += len(ev.RemovedHashes)
			}
			assert.Positive(t, removed, "the pool evicted")
		})
	}
}
