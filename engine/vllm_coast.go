package engine

// Coasting: a running request whose next passes are plain decode steps —
// a token whose KV its blocks have room for, filling no block, not its
// last — coasts through them untouched. Its length and output count stand
// as of the pass it started coasting in (from); each pass that runs adds
// one to both, unwritten, and counts it in its decode batch by the sums
// the worker keeps (coastN, coastLen). It runs again as itself from the
// pass it is due in (the first that is not plain for it), or when a
// preemption takes it or a cancellation ends it; it is brought up to date
// then (uncoast). A pass then costs the requests it has work for, not
// every running one: a request of n output tokens is touched in a few
// passes, not n.
//
// The running phase charges the coasting requests their steps before it
// takes the others, whatever their places in the running order; that
// changes nothing, because no request before a coasting one asks for more
// than a step. The phase gives each request, in order, what it asks while
// the budget lasts, so one that got its step had every request before it
// get all it asked, and each of those asks for one step next (its
// sequence is computed) or has left; requests join the running set at its
// end. A preemption breaks the first link: it gives back the steps its
// request was given in the pass, so a request after one the budget cut
// short may still get its step. So does a running request that waits for
// blocks lent to copies to the host tier (offload.go), taking none of the
// budget. No request starts coasting in a pass that preempted, or in one
// where a request waited so. By induction, while a request coasts, every request before it asks
// for one step, all of them fit, and the order of the charges decides
// nothing; what the budget leaves for the requests after the last coasting
// one is what the running order would have left them.
//
// That the phase gives the requests what they ask in order holds with
// chunked prefill on. Off, a request whose prompt cannot go in what is
// left of the budget is passed over while later ones run, so the order of
// the charges would decide whether it runs: workers with chunked prefill
// off do not coast.
//
// It holds for workers whose outputs report first tokens only (a coasting
// request's tokens are reported nowhere) and whose blocks are a power of
// two; a prefill worker's requests generate one token and never coast.

// coastEntry is a coasting request's place in the queue of those due:
// stale once the request stopped coasting from that pass (s.from).
type coastEntry struct {
	due, from uint64
	s         *seq
}

// coast lets s, a running request the pass just gave a token, coast until
// the first later pass that is not a plain decode step for it, if that is
// not the next one, and reports whether it does. The caller takes it out
// of the active list.
func (v *VLLM) coast(s *seq) bool {
	l := s.length
	// The pass k passes from now (k = 1: the next) computes token l+k-2,
	// which needs ceil((l+k-1)/bs) blocks, and fills block
	// floor((l+k-1)/bs) when that exceeds the stored ones; its emission
	// gives output token out+k, the last when it reaches max_tokens or
	// the sequence max_model_len.
	k := min(len(s.blocks)*v.bs-l+2, s.maxOut-s.out, v.maxModelLen-l)
	if v.caching {
		k = min(k, (s.stored+1)*v.bs-l+1)
	}
	if k <= 1 {
		return false
	}
	s.coasting, s.from = true, v.cpass
	v.coastN++
	v.coastLen += l - int(s.from)
	v.pushCoast(coastEntry{due: v.cpass + uint64(k-1), from: s.from, s: s})
	return true
}

// uncoast brings coasting s up to date: one token for every pass that ran
// since it started coasting.
func (v *VLLM) uncoast(s *seq) {
	d := int(v.cpass - s.from)
	v.coastN--
	v.coastLen -= s.length - int(s.from)
	s.length += d
	s.out += d
	s.computed = s.length - 1
	s.coasting = false
}

// coastStart opens a pass for the coasting requests: those due run again
// as themselves, and the others are charged their steps.
func (v *VLLM) coastStart() {
	if v.coastQ.n > 0 {
		v.dueCoast()
	}
	v.budget -= v.coastN
	v.decodeToks += v.coastN
}

// uncoastCharged brings up to date coasting s, which the running pass
// preempts: the step the pass charged it goes back.
func (v *VLLM) uncoastCharged(s *seq) {
	v.uncoast(s)
	v.budget++
	v.decodeToks--
}

// coastRing is the size of the ring of due passes: a request coasts
// until its next block fills or it needs another, block_size passes or
// so, which the ring covers; one due further off waits in the far heap.
const coastRing = 64

// coastQueue holds the coasting requests by the pass they are due in.
type coastQueue struct {
	ring [coastRing][]coastEntry // due % coastRing, due < cpass+coastRing
	far  []coastEntry            // a min-heap by due, the others
	n    int                     // entries held, stale ones included
}

func (v *VLLM) pushCoast(e coastEntry) {
	q := &v.coastQ
	q.n++
	if e.due < v.cpass+coastRing {
		b := &q.ring[e.due%coastRing]
		*b = append(*b, e)
		return
	}
	q.far = append(q.far, e)
	h := q.far
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].due <= e.due {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
	q.far = h
}

// dueCoast takes from the queue the entries due at pass v.cpass (moving
// into the ring those of the far heap that came within its reach) and
// brings up to date the requests they name that still coast from there.
func (v *VLLM) dueCoast() {
	q := &v.coastQ
	for len(q.far) > 0 && q.far[0].due < v.cpass+coastRing {
		e := popFar(&q.far)
		b := &q.ring[max(e.due, v.cpass)%coastRing]
		*b = append(*b, e)
	}
	b := &q.ring[v.cpass%coastRing]
	for _, e := range *b {
		if e.s.coasting && e.s.from == e.from {
			v.uncoast(e.s)
			v.rejoin(e.s)
		}
	}
	q.n -= len(*b)
	*b = (*b)[:0]
}

// rejoin puts s, which stopped coasting, back in the active list at its
// place in the running order.
func (v *VLLM) rejoin(s *seq) {
	v.active = append(v.active, s)
	a := v.active
	i := len(a) - 1
	for i > 0 && a[i-1].rank > s.rank {
		a[i] = a[i-1]
		i--
	}
	a[i] = s
}

func popFar(hp *[]coastEntry) coastEntry {
	h := *hp
	top, n := h[0], len(h)-1
	last := h[n]
	h = h[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].due < h[c].due {
			c = r
		}
		if h[c].due >= last.due {
			break
		}
		h[i] = h[c]
		i = c
	}
	if n > 0 {
		h[i] = last
	}
	*hp = h
	return top
}
