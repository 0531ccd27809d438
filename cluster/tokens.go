package cluster

import "github.com/kvstrand/mocker/engine"

// tellTokens passes the tokens of one output to the requests that asked
// to hear them (Request.OnToken).
func (c *Cluster) tellTokens(toks []engine.Token) {
	for i := range toks {
		r, _ := c.reqs.Get(toks[i].RequestID)
		if r == nil || r.h == nil || r.h.req.OnToken == nil {
			continue
		}
		r.h.req.OnToken(toks[i].Index, toks[i].At)
	}
}

// MaxModelLen is the longest sequence a request entering the cluster can
// have: its first pool's max_model_len, or the tokens its KV pool holds
// (num_gpu_blocks × block_size) when that is less or max_model_len is not
// set. A longer prompt is refused before any token is drawn; a longer
// output is cut short (Result.Truncated).
func (c *Cluster) MaxModelLen() int { return c.maxPrompt }

// BlockSize is the tokens per KV block, shared by every worker.
func (c *Cluster) BlockSize() int { return c.res.router.BlockSize }
