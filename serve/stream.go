package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kvstrand/mocker/cluster"
)

// progress is what a streamed request's OnToken tells its handler: how
// many tokens exist, and since when the oldest one not yet sent has been
// waiting. OnToken runs on the cluster's loop, so it only records and
// wakes: a slow client never slows the loop (modeled time), it only makes
// its own stream lag, which the handler measures.
type progress struct {
	mu    sync.Mutex
	n     int       // tokens produced: the highest index heard + 1
	sent  int       // tokens the handler has taken
	since time.Time // when token sent became ready
	wake  chan struct{}
}

func (p *progress) onToken(i int, _ float64) {
	p.mu.Lock()
	if i+1 > p.n {
		if p.n == p.sent {
			p.since = time.Now()
		}
		p.n = i + 1
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the tokens [from, to) to send now and when the first of
// them became ready.
func (p *progress) take() (from, to int, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from, to, since = p.sent, p.n, p.since
	p.sent = p.n
	return from, to, since
}

// chunkBufs keeps the chunkers' buffers between streams: a buffer per
// stream, grown afresh to the stream's largest write each time (memory
// touched for the first time, a fault a page), cost a tenth of a loaded
// server's CPU. The buffers hold chunkSpill bytes and a chunk past it.
var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, chunkSpill+1<<10)
	return &b
}}

// chunkSpill is how much a chunker buffers before it passes the chunks on
// to the response, flushed or not: tokens ready together (many, when the
// host lags and the loop delivers them late) still leave at once, in a
// write per chunkSpill bytes rather than one (two system calls each, as
// net/http passes them on), and the buffer stays small.
const chunkSpill = 16 << 10

// maxPooledChunkBuf bounds the buffers chunkBufs keeps (chunks larger
// than chunkSpill grow their stream's buffer past it).
const maxPooledChunkBuf = 64 << 10

// chunker writes a stream's SSE chunks: each method adds one to the
// buffer, flush sends them, release gives the buffer back.
type chunker struct {
	w       http.ResponseWriter
	flusher http.Flusher
	chat    bool
	head    []byte // every chunk's start, through "choices":[
	buf     []byte
	pooled  *[]byte // where buf came from (chunkBufs)
	err     error
}

func (s *Server) newChunker(w http.ResponseWriter, chat bool, id string) *chunker {
	c := &chunker{w: w, chat: chat}
	c.flusher, _ = w.(http.Flusher)
	c.pooled = chunkBufs.Get().(*[]byte)
	c.buf = (*c.pooled)[:0]
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	h := []byte(`data: {"id":`)
	h = appendJSONString(h, id)
	h = append(h, `,"object":"`...)
	h = append(h, obj...)
	h = append(h, `","created":`...)
	h = strconv.AppendInt(h, time.Now().Unix(), 10)
	h = append(h, `,"model":`...)
	h = appendJSONString(h, s.opts.Model)
	h = append(h, `,"choices":[`...)
	c.head = h
	return c
}

// start sends the headers and, for a chat, the assistant role's chunk.
func (c *chunker) start() {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	if c.chat {
		c.buf = append(c.buf, c.head...)
		c.buf = append(c.buf, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
}

// text sends one chunk carrying text; finish, when set, ends the choice.
func (c *chunker) text(text, finish string) {
	if len(c.buf) >= chunkSpill {
		c.write()
	}
	c.buf = append(c.buf, c.head...)
	if c.chat {
		c.buf = append(c.buf, `{"index":0,"delta":{"content":`...)
		c.buf = appendJSONString(c.buf, text)
		c.buf = append(c.buf, `},"logprobs":null,"finish_reason":`...)
	} else {
		c.buf = append(c.buf, `{"index":0,"text":`...)
		c.buf = appendJSONString(c.buf, text)
		c.buf = append(c.buf, `,"logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		c.buf = append(c.buf, `null,"stop_reason":null}]}`+"\n\n"...)
	} else {
		c.buf = appendJSONString(c.buf, finish)
		c.buf = append(c.buf, `,"stop_reason":null}]}`+"\n\n"...)
	}
}

// usage sends the usage chunk (no choices).
func (c *chunker) usage(u usage) {
	c.buf = append(c.buf, c.head...)
	c.buf = append(c.buf, `],"usage":`...)
	b, _ := json.Marshal(u)
	c.buf = append(c.buf, b...)
	c.buf = append(c.buf, "}\n\n"...)
}

// fail sends an error after the headers, as vLLM does: an error object in
// a data line, the status staying 200.
func (c *chunker) fail(e *apiError) {
	b, _ := json.Marshal(errorBody{Error: *e})
	c.buf = append(append(append(c.buf, "data: "...), b...), "\n\n"...)
}

func (c *chunker) done() {
	c.buf = append(c.buf, "data: [DONE]\n\n"...)
}

// flush writes the chunks made since the last flush in one write (one
// per chunkSpill bytes), and sends them: one write rather than one per
// chunk, so that tokens ready together cost one pass through net/http's
// buffers.
func (c *chunker) flush() {
	c.write()
	if c.err == nil && c.flusher != nil {
		c.flusher.Flush()
	}
}

// write passes the chunks made so far on to the response, unflushed.
func (c *chunker) write() {
	if c.err == nil && len(c.buf) > 0 {
		_, c.err = c.w.Write(c.buf)
	}
	c.buf = c.buf[:0]
}

// release gives the buffer back to chunkBufs; the chunker is done.
func (c *chunker) release() {
	if cap(c.buf) <= maxPooledChunkBuf {
		*c.pooled = c.buf[:0]
		chunkBufs.Put(c.pooled)
	}
	c.buf, c.pooled = nil, nil
}

// stream answers p as server-sent events: each token leaves as the
// cluster's paced loop produces it (tokens ready together share a chunk).
// Until the first token the request can still fail with its own status;
// after it, a failure is an error chunk.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p *prepared, id string, run runner) {
	prog := &progress{wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	type ended struct {
		res cluster.Result
		err *apiError
	}
	results := make(chan ended, 1)
	go func() {
		res, e := run(ctx, cluster.Request{Tokens: p.tokens, MaxTokens: p.maxTokens, OnToken: prog.onToken})
		results <- ended{res, e}
	}()
	ans := s.answerFor(p)
	ch := s.newChunker(w, p.chat, id)
	defer ch.release()
	started := false
	var res cluster.Result
	var fail *apiError
	// One write per stream per pacing grain at most: tokens that come
	// within a grain of the last write wait for the grain's end and leave
	// together (a token leaves no later than a grain after the loop made
	// it, and the loop makes it no sooner than a grain before its modeled
	// instant: what a client times is the model's within the grain).
	// Tokens slower than the grain never wait; the first never does.
	// While tokens come that fast (fast), the handler waits out each
	// grain on its timer alone, not woken by every token meanwhile.
	var grain *time.Timer
	var wrote time.Time
	fast := false
	waitGrain := func() (ended bool) {
		d := cluster.PaceSlack - time.Since(wrote)
		if d <= 0 {
			return false
		}
		if grain == nil {
			grain = time.NewTimer(d)
		} else {
			grain.Reset(d)
		}
		select {
		case <-grain.C:
			return false
		case e := <-results:
			grain.Stop()
			res, fail = e.res, e.err
			return true
		}
	}
	for ended := false; !ended; {
		if fast {
			ended = waitGrain()
		} else {
			select {
			case <-prog.wake:
			case e := <-results:
				res, fail, ended = e.res, e.err, true
			}
			if !ended && started && time.Since(wrote) < cluster.PaceSlack {
				fast = true
				ended = waitGrain()
			}
		}
		if ended && res.Outcome != cluster.OutcomeCompleted {
			break // its error goes out below, tokens or not
		}
		from, to, since := prog.take()
		if ended && to < res.OutputTokens {
			to = res.OutputTokens
		}
		if to == from && !ended {
			fast = false // a grain without a token: wait for the next one
			continue
		}
		if !started {
			ch.start()
			started = true
		}
		// One chunk per token, as vLLM streams them: a client that counts
		// chunks, or times the gaps between them, sees every token. Tokens
		// the loop delivered together go out in one write.
		for k := from; k < to; k++ {
			finish := ""
			if ended && k == to-1 {
				finish = finishReason
			}
			ch.text(ans.piece(k), finish)
		}
		if ended && to == from {
			ch.text("", finishReason)
		}
		ch.flush()
		wrote = time.Now()
		if to > from {
			s.m.streamLag.Observe(wrote.Sub(since).Seconds())
		}
		if ch.err != nil {
			cancel() // the client is gone: stop the request
		}
	}
	s.m.observe(p, &res)
	if e := fail; e != nil {
		s.logFailure(id, e)
		if !started {
			writeError(w, e)
			return
		}
		ch.fail(e)
		ch.done()
		ch.flush()
		return
	}
	if !started {
		ch.start()
	}
	if p.includeUsage {
		ch.usage(usageOf(p, &res))
	}
	ch.done()
	ch.flush()
}
