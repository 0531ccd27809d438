package cluster

import (
	"context"
	"slices"
	"sync"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
	"github.com/kvstrand/mocker/transfer"
)

// transferLink carries a handoff's transfer-room steps between a prefill
// worker's transfer server and the decode side: over TCP through each
// prefill's bootstrap.Server (the default), or in memory (RunVirtual).
// Replies come back to the loop as linkMsgs: at most one arrival (the
// server saw the decode) and then exactly one status per connection.
type transferLink interface {
	// arrived is the servers' OnDecodeArrived.
	arrived(tid, reqID uint64)
	// open, close, connect and forget act on r's room: r.tid on
	// r.prefill's server.
	open(r *request)
	close(r *request, transferred bool)
	connect(r *request)
	// forget drops what the link keeps of a transfer whose request ended.
	forget(r *request)
	shutdown()
}

// linkStatus is the answer the decode got.
type linkStatus struct {
	status handoff.Status
	err    string
}

// exchange is one decode's connection to a transfer room, as the loop
// tracks it. Each reply the loop waits for holds a ticket in the event
// queue at the modeled time of the step that asked for it, so modeled time
// never passes a pending reply and the reply lands where it would have had
// it come at once: the arrival (or an early status) at the connection's
// time, the status at the time the room was closed.
//
// An exchange's callbacks for its tickets are made with it and stay with
// it: once its status has been delivered and no callback of its is
// queued, the loop keeps it for a later connection (retireExchange), so a
// handoff's replies take no allocation.
type exchange struct {
	exchangeState
	onArrived, onStatus func()
}

// exchangeState is what one connection's exchange knows.
type exchangeState struct {
	r                    *request
	id, tid              uint64 // r's, for replies that come after r ended
	t1, t2               engine.Ticket
	t1Open, t2Open       bool
	arrived, got, closed bool
	early                bool                   // status came before the loop closed the room: see sourceClosed
	status               handoff.TransferStatus // the reply onStatus delivers
	cues                 int                    // callbacks queued
}

// newExchange returns an exchange for a new connection: an ended one's
// when there is one.
func (c *Cluster) newExchange() *exchange {
	if x := c.spareExch.Take(); x != nil {
		return x
	}
	x := new(exchange)
	x.onArrived = func() {
		x.cues--
		c.feed(x.id, handoff.DecodeArrived{})
		c.retireExchange(x)
	}
	x.onStatus = func() {
		x.cues--
		c.exch.Delete(x.tid)
		c.feed(x.id, x.status)
		c.retireExchange(x)
	}
	return x
}

// exchange is transfer tid's exchange, nil when it has none.
func (c *Cluster) exchange(tid uint64) *exchange {
	x, _ := c.exch.Get(tid)
	return x
}

// retireExchange keeps x for a later connection once nothing will read
// it: its status delivered (it left c.exch then) and no callback of its
// queued. A remote cluster's exchanges are left to the collector.
func (c *Cluster) retireExchange(x *exchange) {
	if x.got && x.cues == 0 && c.remote == nil && !c.opts.fresh && c.exchange(x.tid) != x {
		x.exchangeState = exchangeState{}
		c.spareExch.Put(x)
	}
}

// connect starts the decode's connection for r's room.
func (c *Cluster) connect(r *request) {
	x := c.newExchange()
	x.exchangeState = exchangeState{r: r, id: r.id, tid: r.tid, closed: r.closed}
	if c.remote != nil && !c.remote.coupled { // remote replies take no ticket: see onRemoteLink
		c.exch.Set(r.tid, x)
		c.link.connect(r)
		return
	}
	x.t1, x.t1Open = c.v.Ticket(c.v.Now()), true
	c.exch.Set(r.tid, x)
	c.link.connect(r)
}

// closeRoom tells the source's server how r's hold ended. If the decode is
// connected and was seen, its status is the next reply.
func (c *Cluster) closeRoom(r *request, transferred bool) {
	r.closed = true
	x := c.exchange(r.tid)
	if x == nil {
		c.link.close(r, transferred)
		return
	}
	x.closed = true
	if x.early {
		// The source closed the room itself and its answer to the decode
		// came first: it takes the close's place, as the in-memory room's.
		x.early = false
		x.cues++
		c.v.FillCall(c.v.Ticket(c.v.Now()), x.onStatus)
		return
	}
	// The decode connected to the open room before this close, but its
	// arrival is still on its way (over a socket, from another process;
	// the in-memory room answers a connection at once): then the close
	// goes to the server once the loop is past the arrival's ticket, so
	// that the server sees the decode first, as the in-memory room does,
	// whichever message is faster.
	later := x.t1Open && !x.arrived && !x.got
	if later {
		closing := request{prefill: r.prefill, tid: r.tid, id: r.id}
		c.v.Call(c.v.Now(), func() { c.link.close(&closing, transferred) })
	}
	// The status takes its place now, where one queue would have it.
	if !x.got && !x.t2Open && (c.remote == nil || c.remote.coupled) {
		x.t2, x.t2Open = c.v.Ticket(c.v.Now()), true
	}
	if !later {
		c.link.close(r, transferred)
	}
}

// sourceClosed places a remote decode's ACK or ABORT where the in-memory
// room would have it, and reports whether it did. A remote prefill closes
// a room itself when its hold ends, so the decode's answer can reach the
// loop before the loop has seen the hold end, or the close can reach the
// prefill's server before the decode does (the server then answers from
// the tombstone, with no arrival). The in-memory room sees the decode at
// its connection and answers at the close: so an answer with no arrival
// first delivers the arrival at the connection's place, and an answer
// before the loop's close waits for the close (closeRoom). An Error is
// the server refusing the decode on its own, and goes as it comes.
func (c *Cluster) sourceClosed(x *exchange, st handoff.Status) bool {
	if st != handoff.ACK && st != handoff.Abort {
		return false
	}
	if !x.arrived {
		if !x.t1Open || (x.closed && !x.t2Open) {
			// A connection made after the loop closed the room: the
			// in-memory room answers it at once too.
			return false
		}
		x.arrived, x.t1Open = true, false
		x.cues++
		c.v.FillCall(x.t1, x.onArrived)
	}
	switch {
	case x.t2Open:
		x.t2Open = false
		x.cues++
		c.v.FillCall(x.t2, x.onStatus)
	case x.closed:
		x.cues++
		c.v.Call(c.v.Now(), x.onStatus)
	default:
		x.early = true
	}
	return true
}

// onLinkMsg places a link reply in the event queue.
func (c *Cluster) onLinkMsg(m linkMsg) {
	x := c.exchange(m.tid)
	if x == nil || (m.arrived && m.reqID != x.id) {
		return
	}
	if m.arrived {
		if !x.t1Open || x.arrived {
			return
		}
		x.arrived, x.t1Open = true, false
		x.cues++
		c.v.FillCall(x.t1, x.onArrived)
		if x.closed && !x.got && !x.t2Open {
			x.t2, x.t2Open = c.v.Ticket(x.t1.At), true
		}
		return
	}
	if x.got {
		return
	}
	x.got = true
	x.status = handoff.TransferStatus{Status: m.status.status, Err: m.status.err}
	if c.remote != nil && c.sourceClosed(x, m.status.status) {
		return
	}
	x.cues++
	switch {
	case x.t1Open:
		// A status with no arrival before it: the server refused the
		// decode on its own, and the place kept for a later status goes.
		x.t1Open = false
		c.v.FillCall(x.t1, x.onStatus)
		if x.t2Open {
			x.t2Open = false
			c.v.Void(x.t2)
		}
	case x.t2Open:
		x.t2Open = false
		c.v.FillCall(x.t2, x.onStatus)
	default:
		// A status nobody asked for yet (the server refused the decode on
		// its own: a limit, a shutdown): it takes effect now.
		c.v.Call(c.v.Now(), x.onStatus)
	}
}

// feed steps the machine of request id if it is still in flight.
func (c *Cluster) feed(id uint64, ev handoff.Event) {
	if r, _ := c.reqs.Get(id); r != nil {
		c.step(r, ev)
	}
}

// giveUpExchanges ends every exchange whose reply did not come while the
// cluster closes: the decode saw an error.
func (c *Cluster) giveUpExchanges() {
	tids := make([]uint64, 0, c.exch.Len())
	for tid := range c.exch.All() {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	for _, tid := range tids {
		c.onLinkMsg(linkMsg{tid: tid, status: linkStatus{status: handoff.Error, err: errClosed}})
	}
}

// memLink is the transfer protocol's logic without sockets: rooms, ACK,
// ABORT and tombstones, answered in the loop at once. A room is its
// request's (request.room), not an entry in a map of the link's: a
// handoff then looks nothing up, and the room goes with the record.
type memLink struct {
	c *Cluster
}

// memRoom is a request's transfer room on the in-memory link; the zero
// value is a room not open (or forgotten).
type memRoom struct {
	open, resolved, transferred, waiting bool
}

func newMemLink(c *Cluster) *memLink { return &memLink{c: c} }

func (l *memLink) arrived(uint64, uint64) {}

func (l *memLink) open(r *request) { r.room = memRoom{open: true} }

func (l *memLink) close(r *request, transferred bool) {
	room := &r.room
	if !room.open || room.resolved {
		return
	}
	room.resolved, room.transferred = true, transferred
	if room.waiting {
		l.c.onLinkMsg(linkMsg{tid: r.tid, status: room.status(r.tid)})
	}
}

func (l *memLink) connect(r *request) {
	room := &r.room
	switch {
	case !room.open:
		l.c.onLinkMsg(linkMsg{tid: r.tid, status: linkStatus{status: handoff.Error, err: "transfer room not open"}})
	case room.resolved:
		l.c.onLinkMsg(linkMsg{tid: r.tid, status: room.status(r.tid)})
	default:
		room.waiting = true
		l.c.onLinkMsg(linkMsg{tid: r.tid, reqID: r.id, arrived: true})
	}
}

func (r *memRoom) status(tid uint64) linkStatus {
	if r.transferred {
		return linkStatus{status: handoff.ACK}
	}
	return linkStatus{status: handoff.Abort, err: (&bootstrap.AbortError{TransferID: tid}).Error()}
}

func (l *memLink) forget(r *request) { r.room = memRoom{} }

func (l *memLink) shutdown() {}

// tcpLink speaks the real transfer protocol: each prefill's
// bootstrap.Server holds the rooms, and the decode side connects to it
// with bootstrap.Await, reading the handoff params the prefill returned.
type tcpLink struct {
	c      *Cluster
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// client keeps one connection per prefill server alive across
	// handoffs: a dial per handoff would cost three times the CPU.
	client bootstrap.Client
}

func newTCPLink(c *Cluster) *tcpLink {
	ctx, cancel := context.WithCancel(context.Background())
	return &tcpLink{c: c, ctx: ctx, cancel: cancel}
}

func (l *tcpLink) arrived(tid, reqID uint64) {
	l.c.send(linkMsg{tid: tid, reqID: reqID, arrived: true})
}

func (l *tcpLink) open(r *request) {
	p, tid := r.prefill, r.tid
	if err := p.server.Open(tid); err != nil {
		l.c.log.Warn("transfer room not opened; the decode will be refused", "worker", p.name, "transfer_id", tid, "err", err)
	}
}

func (l *tcpLink) close(r *request, transferred bool) {
	p, tid := r.prefill, r.tid
	if err := transfer.Close(p.server, tid, transferred); err != nil {
		l.c.log.Warn("transfer outcome not delivered", "worker", p.name, "transfer_id", tid, "err", err)
	}
}

func (l *tcpLink) connect(r *request) {
	p, tid, reqID := r.prefill, r.tid, r.id
	// The params go through the decode's reading of them, as they would
	// between processes.
	target, err := transfer.TargetOf(l.c.cfg.Engine, transfer.Params(p.server, l.c.cfg.Engine, tid, reqID))
	if r.pd != nil && r.pd.claimed {
		// A claimed split request connects where its claim says, with the
		// claim's token: the server authenticates what the caller sent.
		target, err = transfer.Target{Addr: r.pd.addr, Room: tid, Token: r.pd.token}, nil
	}
	if err != nil {
		l.c.onLinkMsg(linkMsg{tid: tid, status: linkStatus{status: handoff.Error, err: err.Error()}})
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		st := transfer.Await(l.ctx, &l.client, target, reqID)
		l.c.send(linkMsg{tid: tid, status: linkStatus{status: st.Status, err: st.Err}})
	}()
}

func (l *tcpLink) forget(*request) {}

func (l *tcpLink) shutdown() {
	l.cancel()
	l.wg.Wait()
	_ = l.client.Close()
}
