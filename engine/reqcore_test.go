package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

// TestRequest_GivenHashesChangeNothing: a request that carries its
// prompt's block hashes (as the cluster passes on the ones it routed by)
// runs exactly as one the worker hashes itself, and hashes for another
// block size, or not covering every block, are ignored. The worker keeps
// no reference to the prompt's tokens, which may change after Submit; it
// reads the given hashes while it knows the request and never writes them.
func TestRequest_GivenHashesChangeNothing(t *testing.T) {
	for _, e := range []struct {
		name string
		args func(n int, mod ...func(*Args)) Args
	}{{"vllm", smallArgs}, {"sglang", sglangArgs}} {
		t.Run(e.name, func(t *testing.T) {
			run := func(hashes func(toks []uint32) (int, []kv.LocalHash, []kv.SeqHash)) string {
				w := newWorker(t, e.args(64))
				var sb strings.Builder
				now := 0.0
				emit := func(out *Output) {
					if out != nil {
						serialize(&sb, 0, out)
						now = max(now, out.End)
					}
				}
				var given []*kv.Hashes
				for i := range 6 {
					// Shared prefixes, partial last blocks, then a hit.
					toks := seqTokens(uint32(100*(i%2)), 9+5*i)
					req := Request{ID: uint64(i + 1), Tokens: toks, MaxTokens: 7}
					if bs, locals, seqs := hashes(toks); bs > 0 {
						// Room past the slices' ends: a worker appending to
						// them would write into it.
						locals, seqs = slices.Grow(locals, 8), slices.Grow(seqs, 8)
						req.Hashes = &kv.Hashes{BlockSize: bs, Locals: locals, Seqs: seqs}
						given = append(given, req.Hashes,
							&kv.Hashes{BlockSize: bs, Locals: slices.Clone(locals), Seqs: slices.Clone(seqs)})
					}
					require.NoError(t, w.Submit(now, req, Release))
					clear(toks)
					emit(w.Step(now))
				}
				for {
					at, ok := w.NextWake()
					if !ok {
						break
					}
					now = max(now, at)
					emit(w.Step(now))
				}
				checkWorker(t, w)
				for i := 0; i < len(given); i += 2 {
					h, was := given[i], given[i+1]
					require.Equal(t, was.Locals, h.Locals, "the worker wrote into given token hashes")
					require.Equal(t, was.Seqs, h.Seqs, "the worker wrote into given hashes")
					require.Equal(t, make([]kv.SeqHash, cap(h.Seqs)-len(h.Seqs)), h.Seqs[len(h.Seqs):cap(h.Seqs)],
						"the worker appended to given hashes")
					require.Equal(t, make([]kv.LocalHash, cap(h.Locals)-len(h.Locals)), h.Locals[len(h.Locals):cap(h.Locals)],
						"the worker appended to given token hashes")
				}
				return sb.String()
			}
			own := run(func([]uint32) (int, []kv.LocalHash, []kv.SeqHash) { return 0, nil, nil })
			assert.Contains(t, own, "kv ", "the runs announce blocks")
			given := run(func(toks []uint32) (int, []kv.LocalHash, []kv.SeqHash) {
				l, s := kv.BlockHashes(toks, 4, nil, nil)
				return 4, l, s
			})
			assert.Equal(t, own, given, "given hashes: the same run")
			wrong := run(func(toks []uint32) (int, []kv.LocalHash, []kv.SeqHash) {
				l, s := kv.BlockHashes(toks, 4, nil, nil)
				for i := range s {
					s[i]++
				}
				return 4, l, s
			})
			assert.NotEqual(t, own, wrong, "given hashes are the ones used")
			other := run(func(toks []uint32) (int, []kv.LocalHash, []kv.SeqHash) {
				l, s := kv.BlockHashes(toks, 2, nil, nil)
				return 2, l, s
			})
			assert.Equal(t, own, other, "hashes for another block size are ignored")
			short := run(func(toks []uint32) (int, []kv.LocalHash, []kv.SeqHash) {
				l, s := kv.BlockHashes(toks[:4], 4, nil, nil)
				return 4, l, s
			})
			assert.Equal(t, own, short, "hashes not covering every block are ignored")
		})
	}
}

// TestToken_RangeSpreadAndKey: generated tokens fall in [1000, 2000),
// spread evenly over it, and depend on the key and the index alone; no two
// requests of a worker share a block's worth of them.
func TestToken_RangeSpreadAndKey(t *testing.T) {
	const n = 1_000_000
	var counts [1000]int
	c := reqCore{tokKey: mix64(7 ^ mix64(1))}
	for i := range n {
		tok := c.token(i)
		require.True(t, tok >= 1000 && tok < 2000, "token %d of index %d out of [1000, 2000)", tok, i)
		counts[tok-1000]++
	}
	// Each value is expected n/1000 = 1,000 times, with a standard
	// deviation of about 32: ±200 is over six of them.
	for v, k := range counts {
		require.InDelta(t, n/1000, k, 200, "token %d drawn %d times", 1000+v, k)
	}
	again := reqCore{tokKey: c.tokKey}
	for i := range 1000 {
		require.Equal(t, c.token(i), again.token(i), "index %d: the same key, another token", i)
	}
	// fillTail stores, from any index, odd or even, the tokens token gives.
	for from := range 6 {
		for n := range 7 {
			r := reqCore{tokKey: c.tokKey, prompt: 3, tailAt: 2, tail: []uint32{7}}
			for i := range from {
				r.tail = append(r.tail, r.token(i))
			}
			r.length = 3 + from + n
			r.fillTail()
			require.Len(t, r.tail, 1+from+n)
			for i := range from + n {
				require.Equal(t, r.token(i), r.tail[1+i], "from %d, %d more: index %d", from, n, i)
			}
		}
	}
	// Blocks of 16 generated tokens of 2,000 requests on one worker: all
	// distinct.
	blocks := map[kv.LocalHash]uint64{}
	for id := range uint64(2000) {
		r := reqCore{tokKey: mix64(7 ^ mix64(id))}
		toks := make([]uint32, 16)
		for b := range 8 {
			for i := range toks {
				toks[i] = r.token(16*b + i)
			}
			h := kv.HashTokens(toks)
			if other, dup := blocks[h]; dup {
				t.Fatalf("requests %d and %d generate the same block", other, id)
			}
			blocks[h] = id
		}
	}
}

// TestWorker_TokensDoNotDependOnTheBatch: a request generates the same
// tokens run alone as among others, on each engine.
func TestWorker_TokensDoNotDependOnTheBatch(t *testing.T) {
	for name, args := range map[string]Args{"vllm": smallArgs(256), "sglang": sglangArgs(256)} {
		t.Run(name, func(t *testing.T) {
			run := func(ids ...uint64) map[uint64][]uint32 {
				w := newWorker(t, args)
				for _, id := range ids {
					require.NoError(t, w.Submit(0, Request{ID: id, Tokens: seqTokens(uint32(50*id+1), 9), MaxTokens: 7}, Release))
				}
				var r record
				drive(t, w, &r, 0)
				got := map[uint64][]uint32{}
				for _, tk := range r.tokens {
					require.Equal(t, len(got[tk.RequestID]), tk.Index, "request %d's tokens out of order", tk.RequestID)
					got[tk.RequestID] = append(got[tk.RequestID], tk.Token)
				}
				return got
			}
			alone := run(3)
			require.Len(t, alone[3], 7)
			among := run(1, 2, 3, 4, 5)
			assert.Equal(t, alone[3], among[3], "request 3's tokens")
			assert.NotEqual(t, among[1], among[2], "two requests, the same tokens")
		})
	}
}
