package engine

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvstrand/mocker/kv"
)

// reqCore is what every scheduler model keeps of a request whatever its KV
// layout: the token sequence and its block hashes, the output progress and
// the figures a Completion reports. The vLLM seq and the SGLang sgReq embed
// it, so admission, token emission and handoff activation read the same in
// both models.
type reqCore struct {
	id     uint64
	tokens []uint32 // prompt, then generated tokens
	prompt int
	maxOut int
	out    int // tokens generated
	hashes []kv.SeqHash
	locals []kv.LocalHash
	cached int // prompt tokens served from cache at admission
	policy CompletionPolicy
	// priority is Request.Priority.
	priority int
	// admitted is set once the request first got KV; cached is fixed then.
	admitted bool

	arrival, firstAt float64
}

// checkNew reports why req cannot join a worker whose live requests are
// byID: an empty prompt, or an id already in use.
func checkNew[T any](req Request, byID map[uint64]T) error {
	if len(req.Tokens) == 0 {
		return fmt.Errorf("request %d: empty prompt; send at least one token", req.ID)
	}
	if _, dup := byID[req.ID]; dup {
		return fmt.Errorf("request %d: id already in use on this worker", req.ID)
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
// reserved up front for the prompt and its output up to that length, so a
// huge max_tokens costs nothing until the length rules stop it. With
// hashBlock > 0 (prefix caching on) the prompt's full blocks of that many
// tokens are hashed at once; the token slice and hash arenas of a recycled
// request are reused.
func (c *reqCore) fill(now float64, req Request, policy CompletionPolicy, prefillOnly bool, hashBlock, maxLen int) {
	c.id = req.ID
	c.prompt = len(req.Tokens)
	c.maxOut = max(1, req.MaxTokens)
	if prefillOnly {
		c.maxOut = 1
	}
	want := c.prompt
	if room := maxLen - c.prompt; room > 0 {
		want += min(c.maxOut, room)
	}
	if cap(c.tokens) < want {
		c.tokens = make([]uint32, 0, want)
	}
	c.tokens = append(c.tokens[:0], req.Tokens...)
	c.policy = policy
	c.priority = req.Priority
	c.arrival = now
	if hashBlock > 0 {
		c.locals, c.hashes = kv.BlockHashes(c.tokens, hashBlock, c.locals[:0], c.hashes[:0])
	}
}

// recycled is c emptied for reuse, keeping its slices' storage.
func (c *reqCore) recycled() reqCore {
	return reqCore{tokens: c.tokens[:0], hashes: c.hashes[:0], locals: c.locals[:0]}
}

// ensureHashes extends c's block hashes to cover its first n blocks of
// block tokens, which must be full. Prompt blocks are hashed when the
// request arrives; blocks of generated tokens when they are first needed.
func (c *reqCore) ensureHashes(n, block int) {
	for i := len(c.hashes); i < n; i++ {
		l := kv.HashTokens(c.tokens[i*block : (i+1)*block])
		h := kv.SeqHash(l)
		if i > 0 {
			h = kv.ChainHash(c.hashes[i-1], l)
		}
		c.locals = append(c.locals, l)
		c.hashes = append(c.hashes, h)
	}
}

// generate produces c's next token at end from rng and reports it in out. The
// first token stamps the request's time to first token.
func (c *reqCore) generate(rng *rand.Rand, end float64, out *Output) {
	tok := 1000 + rng.Uint32N(1000)
	c.tokens = append(c.tokens, tok)
	idx := c.out
	c.out++
	if idx == 0 {
		c.firstAt = end
	}
	out.Tokens = append(out.Tokens, Token{RequestID: c.id, Token: tok, Index: idx, At: end})
}

// completion is c's Completion at `at` with the fields every model fills;
// the caller adds what its model knows (preemptions, holds, truncation).
func (c *reqCore) completion(at float64) Completion {
	return Completion{RequestID: c.id, At: at, Arrival: c.arrival, FirstTokenAt: c.firstAt,
		PromptTokens: c.prompt, OutputTokens: c.out, CachedTokens: c.cached}
}
