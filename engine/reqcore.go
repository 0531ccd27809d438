package engine

import (
	"fmt"
	"slices"

	"github.com/kvstrand/mocker/internal/idtab"
	"github.com/kvstrand/mocker/kv"
)

// reqCore is what every scheduler model keeps of a request whatever its KV
// layout: the sequence's length and block hashes, the output progress and
// the figures a Completion reports. The vLLM seq and the SGLang sgReq embed
// it, so admission, token emission and handoff activation read the same in
// both models.
//
// Token ids matter only to block hashes, so the prompt is not copied: its
// full blocks are hashed at arrival, and only the ids after them (the
// partial last block, then generated tokens) are kept, for the blocks
// hashed as they fill. A worker that reports the token ids of the blocks
// it stores keeps the whole sequence (tailAt 0).
type reqCore struct {
	// The fields every pass reads or writes of a running request come
	// first, so that a decode pass over a full batch touches as few cache
	// lines per request as it can.
	id     uint64
	length int // tokens in the sequence: prompt, then generated
	out    int // tokens generated
	maxOut int
	prompt int
	// tail holds the sequence's tokens from position tailAt on.
	tail   []uint32
	tailAt int
	// hashes and locals are the hashes of the sequence's full blocks
	// hashed so far: in an arena of the worker's (hashArenas), or, until
	// the sequence fills a block of generated tokens, the prompt hashes the
	// request came with (borrowed), which the worker reads and never
	// writes. A request waiting in a long queue then holds no copy of them.
	hashes []kv.SeqHash
	locals []kv.LocalHash
	cached int32 // prompt tokens served from cache at admission
	// queued is the modeled ms from arrival to the pass that first
	// scheduled the request; 32 bits, with cached, keep a vLLM seq in its
	// size class (TestVLLM_SeqFillsItsSizeClass).
	queued float32
	policy CompletionPolicy
	// borrowed says hashes and locals are the request's.
	borrowed bool
	// hashRoom is how many blocks the sequence can ever fill: the size of
	// the arenas it takes.
	hashRoom int32
	// priority is Request.Priority.
	priority int
	// tokKey keys the request's generated tokens (token).
	tokKey uint64

	arrival, firstAt float64
}

// checkNew reports why req cannot join a worker whose live requests are
// byID, which hashes blocks of hashBlock tokens (0: none) and keeps whole
// prompts when keepPrompt: an empty prompt, an id already in use, or
// tokens left out (Request.Skip) that the worker would read.
func checkNew[T any](req Request, byID *idtab.Table[T], hashBlock int, keepPrompt bool) error {
	if req.PromptLen() == 0 {
		return fmt.Errorf("request %d: empty prompt; send at least one token", req.ID)
	}
	if byID.Has(req.ID) {
		return fmt.Errorf("request %d: id already in use on this worker", req.ID)
	}
	if req.Skip < 0 {
		return fmt.Errorf("request %d: negative skip %d", req.ID, req.Skip)
	}
	if req.Skip > 0 && hashBlock > 0 {
		if h := req.Hashes; keepPrompt || !h.Covers(req.PromptLen(), hashBlock) || req.Skip > len(h.Seqs)*hashBlock {
			return fmt.Errorf("request %d: the prompt's first %d tokens are left out, but this worker reads them "+
				"(it hashes blocks of %d tokens, or reports block token ids)", req.ID, req.Skip, hashBlock)
		}
	}
	return nil
}

// errPrefillDestination is Reserve's refusal on a prefill worker, which can
// only ever be the source side of a handoff.
func errPrefillDestination(id uint64) error {
	return fmt.Errorf("request %d: worker_type %q cannot be a handoff destination; reserve on a decode or aggregated worker",
		id, WorkerPrefill)
}

// fill starts c as req arriving at now. A prefill worker generates only the
// first token (prefillOnly). maxLen is the longest the sequence can ever
// grow on this worker (its pool, its max_model_len): token storage is
// reserved up front for the tail and its output up to that length, so a
// huge max_tokens costs nothing until the length rules stop it. With
// hashBlock > 0 (prefix caching on) the prompt's full blocks of that many
// tokens are hashed at once, or taken from req when it carries them; the
// tail and hash arenas of a recycled request are reused. keepPrompt keeps
// the whole prompt in the tail (tailAt 0), for a worker that reports the
// token ids of the blocks it stores (Worker.RecordKVTokens).
func (c *reqCore) fill(now float64, req Request, policy CompletionPolicy, prefillOnly bool, hashBlock, maxLen int, arenas *hashArenas, tokSeed uint64, keepPrompt bool) {
	c.id = req.ID
	c.prompt = req.PromptLen()
	c.length = c.prompt
	c.maxOut = max(1, req.MaxTokens)
	if prefillOnly {
		c.maxOut = 1
	}
	longest := c.longest(maxLen)
	// Without prefix caching nothing is ever hashed, so no token id is
	// read again.
	c.tailAt = c.prompt
	if hashBlock > 0 {
		// Arenas take room for the hashes of every block the sequence can
		// fill, so that hashing generated blocks never regrows them.
		c.hashRoom = int32(longest / hashBlock)
		if h := req.Hashes; h.Covers(c.prompt, hashBlock) {
			// Capacity clipped: nothing can append into the caller's arrays.
			n := len(h.Seqs)
			c.locals, c.hashes, c.borrowed = h.Locals[:n:n], h.Seqs[:n:n], true
		} else {
			c.locals, c.hashes = arenas.take(int(c.hashRoom))
			c.locals, c.hashes = kv.BlockHashes(req.Tokens, hashBlock, c.locals, c.hashes)
		}
		c.tailAt = len(c.hashes) * hashBlock
		if keepPrompt {
			c.tailAt = 0
		}
	}
	if want := longest - c.tailAt; cap(c.tail) < want {
		c.tail = make([]uint32, 0, want)
	}
	c.tail = append(c.tail[:0], req.Tokens[c.tailAt-req.Skip:]...)
	c.policy = policy
	c.priority = req.Priority
	c.arrival = now
	c.tokKey = mix64(tokSeed ^ mix64(req.ID))
}

// longest is the longest c's sequence can grow on a worker where it can
// reach maxLen tokens.
func (c *reqCore) longest(maxLen int) int {
	n := c.prompt
	if room := maxLen - c.prompt; room > 0 {
		n += min(c.maxOut, room)
	}
	return n
}

// recycled is c emptied for reuse, keeping its token storage; its hash
// arenas go back to arenas.
func (c *reqCore) recycled(arenas *hashArenas) reqCore {
	if !c.borrowed && cap(c.hashes) > 0 {
		arenas.give(c.locals, c.hashes)
	}
	return reqCore{tail: c.tail[:0]}
}

// hashArenas keeps a worker's spare hash arenas: the storage of the block
// hashes of the requests that hash their own, passed from request to
// request.
type hashArenas struct {
	locals [][]kv.LocalHash
	seqs   [][]kv.SeqHash
}

// take returns an empty pair of arenas with room for n blocks.
func (a *hashArenas) take(n int) ([]kv.LocalHash, []kv.SeqHash) {
	var ls []kv.LocalHash
	var hs []kv.SeqHash
	if k := len(a.seqs) - 1; k >= 0 {
		ls, hs = a.locals[k], a.seqs[k]
		a.locals[k], a.seqs[k] = nil, nil
		a.locals, a.seqs = a.locals[:k], a.seqs[:k]
	}
	return slices.Grow(ls[:0], n), slices.Grow(hs[:0], n)
}

// give keeps a pair of arenas for a later take.
func (a *hashArenas) give(ls []kv.LocalHash, hs []kv.SeqHash) {
	a.locals, a.seqs = append(a.locals, ls[:0]), append(a.seqs, hs[:0])
}

// push appends a token to the sequence.
func (c *reqCore) push(tok uint32) {
	c.tail = append(c.tail, tok)
	c.length++
}

// ensureHashes extends c's block hashes to cover its first n blocks of
// block tokens, which must be full. Prompt blocks are hashed when the
// request arrives; blocks of generated tokens when they are first needed.
func (c *reqCore) ensureHashes(n, block int, arenas *hashArenas) {
	if c.borrowed && n > len(c.hashes) {
		// The first generated block to hash: the hashes become c's own.
		ls, hs := arenas.take(max(n, int(c.hashRoom)))
		c.locals, c.hashes, c.borrowed = append(ls, c.locals...), append(hs, c.hashes...), false
	}
	if n*block-c.tailAt > len(c.tail) {
		c.fillTail()
	}
	for i := len(c.hashes); i < n; i++ {
		at := i*block - c.tailAt
		l := kv.HashTokens(c.tail[at : at+block])
		h := kv.SeqHash(l)
		if i > 0 {
			h = kv.ChainHash(c.hashes[i-1], l)
		}
		c.locals = append(c.locals, l)
		c.hashes = append(c.hashes, h)
	}
}

// generate produces c's next token at end and reports it in out. The
// first token stamps the request's time to first token.
func (c *reqCore) generate(end float64, out *Output) {
	c.fillTail()
	idx := c.out
	tok := c.token(idx)
	c.push(tok)
	c.out++
	if idx == 0 {
		c.firstAt = end
	} else if out.firstTokens {
		return
	}
	out.Tokens = append(out.Tokens, Token{RequestID: c.id, Token: tok, Index: idx, At: end})
}

// token is c's generated token of output index idx: a value in
// [1000, 2000) that depends only on the worker's seed, the request's id
// and idx. A request's tokens do not depend on what else its passes run,
// and a token need not be stored to be known: a decode step that reports
// no token leaves it unstored (fillTail stores it when a block hash reads
// it).
//
// Tokens come in pairs: indexes 2i and 2i+1 are the low and high halves of
// one mixed word, each scaled to [0, 1000).
func (c *reqCore) token(idx int) uint32 {
	return tokenOf(uint32(c.tokenPair(idx>>1) >> (uint(idx&1) * 32)))
}

// tokenPair is the mixed word of c's tokens 2*pair and 2*pair+1.
func (c *reqCore) tokenPair(pair int) uint64 {
	return mix64(c.tokKey + uint64(pair)*0x9e3779b97f4a7c15)
}

// tokenOf scales a random 32-bit word to a token in [1000, 2000).
func tokenOf(w uint32) uint32 { return 1000 + uint32(uint64(w)*1000>>32) }

// fillTail stores the generated tokens c counts (length) but has not
// stored. The token at position p of the sequence has output index
// p - prompt: the first is the prefill's (the placeholder a destination
// pushes for it), and is always stored. The tail has room for them (fill
// made it for the longest the sequence can grow), and a pair of tokens
// takes one mixed word.
func (c *reqCore) fillTail() {
	n, end := len(c.tail), c.length-c.tailAt
	if end <= n {
		return
	}
	t := slices.Grow(c.tail, end-n)[:end]
	i, idx := n, c.tailAt+n-c.prompt
	if idx&1 == 1 {
		t[i] = c.token(idx)
		i, idx = i+1, idx+1
	}
	for ; i+1 < end; i, idx = i+2, idx+2 {
		x := c.tokenPair(idx >> 1)
		t[i], t[i+1] = tokenOf(uint32(x)), tokenOf(uint32(x>>32))
	}
	if i < end {
		t[i] = c.token(idx)
	}
	c.tail = t
}

// mix64 is SplitMix64's finalizer: a bijection of 64-bit words whose every
// output bit depends on every input bit.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// completion is c's Completion at `at` with the fields every model fills;
// the caller adds what its model knows (preemptions, holds, truncation).
func (c *reqCore) completion(at float64) Completion {
	return Completion{RequestID: c.id, At: at, Arrival: c.arrival, QueueMs: float64(c.queued), FirstTokenAt: c.firstAt,
		PromptTokens: c.prompt, OutputTokens: c.out, CachedTokens: int(c.cached)}
}
