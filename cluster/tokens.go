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
