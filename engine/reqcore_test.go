package engine

import (
	"math/rand/v2"
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

// TestOutputTokenDraw_SameAsUint32N checks that drawing output tokens
// straight from the PCG gives what rand.Rand.Uint32N(1000) would, draw for
// draw: a run's tokens (and the hashes of its output blocks) do not
// depend on which of the two draws them.
func TestOutputTokenDraw_SameAsUint32N(t *testing.T) {
	for seed := range uint64(8) {
		direct := rand.NewPCG(seed, 0x6d6f636b6572)
		viaRand := rand.New(rand.NewPCG(seed, 0x6d6f636b6572))
		for i := range 100_000 {
			if got, want := outputTokenDraw(direct), viaRand.Uint32N(1000); got != want {
				t.Fatalf("seed %d, draw %d: got %d, want %d", seed, i, got, want)
			}
		}
	}
}
