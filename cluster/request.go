package cluster

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/kvstrand/mocker/kv"

	"github.com/kvstrand/mocker/internal/jsonval"
)

// Request is one generation request, as a script's cluster.generate({...})
// gives it.
type Request struct {
	// PromptTokens is the prompt length; required (≥ 1) unless Tokens is
	// given.
	PromptTokens int `json:"prompt_tokens"`
	// MaxTokens is the number of tokens to generate; 0 means 16, and more
	// than MaxRequestMaxTokens is refused.
	MaxTokens int `json:"max_tokens"`
	// Prefix names a shared prompt prefix: requests with the same Prefix
	// start with the same PrefixTokens tokens, derived from the string
	// alone, so they hit each other's cached KV.
	Prefix       string `json:"prefix"`
	PrefixTokens int    `json:"prefix_tokens"`
	// Tokens gives the prompt's token ids explicitly, instead of
	// PromptTokens, Prefix and PrefixTokens.
	Tokens []uint32 `json:"tokens"`
	// Hashes, when set, are the block hashes of Tokens in blocks of the
	// workers' block_size (Config.BlockSize), as kv.BlockHashes computes
	// them: a caller that has them (a trace replay builds them from its
	// hash ids) spares the cluster hashing the prompt. They are copied at
	// arrival, and ignored unless they cover Tokens in that block size.
	// When they cover them, a cluster that copies prompts keeps only the
	// tokens past the complete blocks, unless a KV-events listener
	// (OnKVEvents) or a remote worker needs every id. Hashes that are not
	// those of Tokens give wrong prefix-cache hits.
	Hashes *kv.Hashes `json:"-"`
	// OnToken, when set, hears each output token of the request as the
	// loop delivers the pass that produced it: index from 0 and the pass's
	// modeled end in ms. On a paced cluster that is when the wall clock
	// reaches the token's modeled time, so a caller streaming tokens sends
	// each at its modeled instant. Every token is heard only with
	// Config.StreamTokens (the first one always). It runs on the cluster's
	// loop: it must return at once and never call the cluster. An index may
	// be heard again (a preempted request recomputes); a caller keeps the
	// highest.
	OnToken func(index int, atMs float64) `json:"-"`
}

// MaxRequestMaxTokens is the largest max_tokens a request may ask for
// (16,777,216). It is far beyond any modeled pool or context length, whose
// limits end a request sooner (truncated); past it a value is more likely a
// mistake than a workload.
const MaxRequestMaxTokens = 1 << 24

// MaxPromptTokens is the longest prompt a request may carry (4,194,304
// tokens, prompt_tokens or the length of tokens): 256 times the largest
// default pool, beyond the context window of served models, and a 16 MiB
// token slice at most. It is checked before anything in proportion to the
// prompt is allocated; a prompt that passes it but outgrows its workers'
// pool or max_model_len is then refused by the engine.
const MaxPromptTokens = 1 << 22

// Outcomes of a request, Result.Outcome.
const (
	OutcomeCompleted = "completed"
	OutcomeAborted   = "aborted"
	OutcomeRejected  = "rejected"
	OutcomeError     = "error"
)

// Result is how one request ended. Times are modeled milliseconds (the
// engine timeline), so they do not depend on the speedup ratio.
type Result struct {
	// Outcome is "completed", "aborted" (the source gave the handoff up),
	// "rejected" (refused for capacity or by an engine) or "error" (bad
	// input, cancellation, shutdown).
	Outcome string `json:"outcome"`
	// Error says why when Outcome is not "completed", and why the output
	// is short when Truncated.
	Error string `json:"error,omitempty"`
	// TTFTMs is arrival to first token, E2EMs arrival to last token, ITLMs
	// the mean gap between output tokens after the first.
	TTFTMs float64 `json:"ttft_ms"`
	ITLMs  float64 `json:"itl_ms"`
	E2EMs  float64 `json:"e2e_ms"`
	// QueueMs is arrival to the first pass that scheduled the request on
	// the worker that produced its first token (vLLM's queue time); the
	// rest of TTFTMs is prefill compute. Kept out of the JSON.
	QueueMs float64 `json:"-"`
	// HoldMs is how long the prefill worker held the KV (first token to
	// release); TransferMs the modeled transfer; DecodeWaitMs the decode's
	// wait from arrival to its reservation. 0 when not applicable.
	HoldMs       float64 `json:"pin_ms"`
	TransferMs   float64 `json:"transfer_ms"`
	DecodeWaitMs float64 `json:"decode_wait_ms"`
	// HoldStarted says a prefill KV hold started; HoldOutcome how it ended:
	// "transferred", "aborted" or "" without a hold.
	HoldStarted bool   `json:"pinned"`
	HoldOutcome string `json:"pin_outcome,omitempty"`
	// OutputTokens counts generated tokens (the prefill's first one
	// included); CachedTokens the prompt tokens found in the prefill
	// worker's cache.
	OutputTokens int `json:"output_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// PrefillWorker and DecodeWorker name the workers ("prefill-0",
	// "decode-1"); an aggregated request names its one worker in both.
	PrefillWorker string `json:"prefill_worker,omitempty"`
	DecodeWorker  string `json:"decode_worker,omitempty"`
	// PrefillDPRank and DecodeDPRank are the data-parallel ranks within
	// those workers that served the request (each worker's dp_size ranks
	// are routed to separately, so the two sides' ranks are independent);
	// 0 for workers with one rank, and for requests never routed.
	PrefillDPRank int `json:"prefill_dp_rank"`
	DecodeDPRank  int `json:"decode_dp_rank"`
	// TransferID is the handoff's transfer id; 0 for aggregated requests
	// and requests that never held KV.
	TransferID uint64 `json:"transfer_id"`
	// Truncated says a completed request stopped short of max_tokens
	// because its sequence hit a length limit on the worker that generated
	// it: it outgrew the KV pool after a preemption, or reached
	// max_model_len. Outcome stays "completed"; Error says which limit and
	// where the output stopped.
	Truncated bool `json:"truncated"`
	// PrefillRejected says the router refused the request because every
	// prefill worker (every worker, when aggregated) was over its busy
	// threshold: the cascade's refusals.
	PrefillRejected bool `json:"prefill_rejected"`
}

// validate checks r and fills its defaults, naming the field at fault.
func (r *Request) validate() error {
	if r.MaxTokens == 0 {
		r.MaxTokens = DefaultMaxTokens
	}
	if r.MaxTokens < 1 || r.MaxTokens > MaxRequestMaxTokens {
		return fmt.Errorf("max_tokens: want an integer in [1, %d], got %d", MaxRequestMaxTokens, r.MaxTokens)
	}
	if len(r.Tokens) > MaxPromptTokens {
		return fmt.Errorf("tokens: want at most %d token ids, got %d", MaxPromptTokens, len(r.Tokens))
	}
	if len(r.Tokens) > 0 {
		return nil
	}
	if r.PromptTokens < 1 {
		return fmt.Errorf("prompt_tokens: want an integer ≥ 1 (or give tokens), got %d", r.PromptTokens)
	}
	if _, err := jsonval.Int("prompt_tokens", r.PromptTokens, 1, MaxPromptTokens); err != nil {
		return err
	}
	if r.PrefixTokens < 0 || r.PrefixTokens > r.PromptTokens {
		return fmt.Errorf("prefix_tokens: want an integer in [0, prompt_tokens=%d], got %d", r.PromptTokens, r.PrefixTokens)
	}
	return nil
}

// promptTokens builds the prompt: the prefix's tokens come from a generator
// seeded by the prefix string alone (so every request with that prefix
// shares them, in any cluster), the rest from one seeded by the cluster seed
// and the request's sequence number.
func promptTokens(r Request, seed, seq uint64) []uint32 {
	return appendPromptTokens(nil, r, seed, seq)
}

// appendPromptTokens is promptTokens appending to dst, whose storage it
// reuses when it has room.
func appendPromptTokens(dst []uint32, r Request, seed, seq uint64) []uint32 {
	if len(r.Tokens) > 0 {
		return append(dst, r.Tokens...)
	}
	dst = slices.Grow(dst, r.PromptTokens)
	out := dst[len(dst) : len(dst)+r.PromptTokens]
	n := 0
	if r.Prefix != "" && r.PrefixTokens > 0 {
		n = fillPrefix(out[:r.PrefixTokens], r.Prefix)
	}
	g := restTokens(seed, seq)
	fillTokens(out[n:], &g)
	return dst[:len(dst)+r.PromptTokens]
}

// fillPrefix fills out with the tokens of the shared prefix named name.
func fillPrefix(out []uint32, name string) int {
	h := xxh3.HashString(name)
	g := newTokenStream(h, 0x6a09e667f3bcc909)
	return fillTokens(out, &g)
}

// restTokens draws the tokens of request seq past its prefix.
func restTokens(seed, seq uint64) tokenStream {
	return newTokenStream(seed, seq^0xbb67ae8584caa73b)
}

// prefixMemo keeps the tokens of the shared prefixes that requests name,
// with the hashes of their complete blocks, so that the loop draws and
// hashes a prefix once rather than for every request that starts with
// it. It keeps at most prefixMemoSize prefixes of at most
// prefixMemoTokens tokens each; past that the oldest gives its storage to
// the newcomer.
type prefixMemo struct {
	byKey   map[prefixKey]*prefixEntry
	entries []*prefixEntry // in the order they were filled, a ring
	next    int            // the entry to give up next, once full
}

const (
	prefixMemoSize   = 64
	prefixMemoTokens = 1 << 16
)

type prefixKey struct {
	name   string
	tokens int
}

type prefixEntry struct {
	key    prefixKey
	tokens []uint32
	locals []kv.LocalHash
	seqs   []kv.SeqHash
}

// prompt is appendPromptTokens, taking the prefix from the memo; it also
// returns the prefix's entry (nil when it did not use one), whose hashes
// are those of the prompt's first blocks.
func (m *prefixMemo) prompt(dst []uint32, r Request, seed, seq uint64, blockSize int) ([]uint32, *prefixEntry) {
	if len(r.Tokens) > 0 || r.Prefix == "" || r.PrefixTokens == 0 || r.PrefixTokens > prefixMemoTokens || blockSize <= 0 {
		return appendPromptTokens(dst, r, seed, seq), nil
	}
	e := m.get(prefixKey{r.Prefix, r.PrefixTokens}, blockSize)
	dst = append(dst, e.tokens...)
	rest := r.PromptTokens - r.PrefixTokens
	dst = slices.Grow(dst, rest)
	g := restTokens(seed, seq)
	fillTokens(dst[len(dst):len(dst)+rest], &g)
	return dst[:len(dst)+rest], e
}

func (m *prefixMemo) get(k prefixKey, blockSize int) *prefixEntry {
	if e := m.byKey[k]; e != nil {
		return e
	}
	if m.byKey == nil {
		m.byKey = make(map[prefixKey]*prefixEntry, prefixMemoSize)
	}
	var e *prefixEntry
	if len(m.entries) < prefixMemoSize {
		e = &prefixEntry{}
		m.entries = append(m.entries, e)
	} else {
		e = m.entries[m.next]
		m.next = (m.next + 1) % prefixMemoSize
		delete(m.byKey, e.key)
	}
	e.key = k
	e.tokens = slices.Grow(e.tokens[:0], k.tokens)[:k.tokens]
	fillPrefix(e.tokens, k.name)
	e.locals, e.seqs = kv.BlockHashes(e.tokens, blockSize, e.locals[:0], e.seqs[:0])
	m.byKey[k] = e
	return e
}

// tokenStream draws a prompt's token ids: wyrand (a Weyl sequence mixed
// through one 64×64→128-bit multiply), each draw giving two tokens, one
// per 32-bit half. A prompt of a thousand fresh tokens was about a tenth
// of a scripted request's CPU drawn one token per PCG step; this draws
// them in about two fifths of the time. The ids only need to be
// reproducible from the seeds and uniform over the vocabulary (hashed
// into blocks, they must not repeat by chance).
type tokenStream struct{ s uint64 }

// newTokenStream seeds a stream from two words, mixed (splitmix64's
// finalizer) so that nearby seeds start far apart in the sequence.
func newTokenStream(a, b uint64) tokenStream {
	return tokenStream{s: mix64(a ^ mix64(b^0x9e3779b97f4a7c15))}
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *tokenStream) next() uint64 {
	g.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(g.s, g.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// fillTokens fills out with token ids in [0, vocabSize) drawn from g and
// returns len(out). Each 32-bit half of a draw becomes an id by Lemire's
// multiply; the rare half whose product would bias the ids (fewer than
// 6 in a million) is skipped, so every id is equally likely.
func fillTokens(out []uint32, g *tokenStream) int {
	const thresh = (1 << 32) % vocabSize // 2³² mod vocabSize
	i := 0
	for i < len(out) {
		x := g.next()
		if m := (x & 0xffffffff) * vocabSize; uint32(m) >= thresh {
			out[i] = uint32(m >> 32)
			i++
		}
		if i == len(out) {
			break
		}
		if m := (x >> 32) * vocabSize; uint32(m) >= thresh {
			out[i] = uint32(m >> 32)
			i++
		}
	}
	return len(out)
}
