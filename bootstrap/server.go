package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults applied by Config for zero-valued fields.
const (
	DefaultAddr            = "127.0.0.1:0"
	DefaultMaxRooms        = 4096
	DefaultMaxConns        = 1024
	DefaultMaxConnsPerHost = DefaultMaxConns
	DefaultMaxTombstones   = 65536
	DefaultHeaderTimeout   = 5 * time.Second
	DefaultPendingWait     = 30 * time.Second
	DefaultAbortedTTL      = 30 * time.Second
	DefaultCompletedTTL    = 5 * time.Second
	DefaultIdleTimeout     = 60 * time.Second
)

// Config configures a Server. The zero value is usable: every zero field
// takes the default named next to it.
type Config struct {
	// Addr is the TCP address to bind. Default DefaultAddr (loopback, any
	// free port), which suits the in-process cluster.
	Addr string
	// AdvertisedHost is the host put into handoff params, i.e. what decode
	// workers dial: a bare host name or IP address, without brackets or a
	// port (the port is always the listener's). Default: the host the
	// listener is bound to. It is required when Addr binds every interface
	// (":0", "0.0.0.0:7000", "[::]:0", or a name resolving to such an
	// address, which Start refuses), because such an address is not
	// something a peer can dial.
	AdvertisedHost string
	// MaxRooms bounds rooms opened by the prefill side and not yet resolved;
	// Open fails with ErrRoomsFull beyond it. Default DefaultMaxRooms.
	MaxRooms int
	// MaxConns bounds concurrent decode connections (each holds one
	// goroutine). At the limit a new connection evicts the oldest one that
	// has not authenticated (still sending its header, or idle between
	// transfers); when every connection is an authenticated decode waiting
	// in a room, the new one is answered ERROR and closed. Default
	// DefaultMaxConns.
	MaxConns int
	// MaxConnsPerHost bounds the connections from one remote IP, with the
	// same eviction rule as MaxConns applied among that host's connections.
	// The default equals DefaultMaxConns, because an in-process cluster's
	// decodes all share the loopback address; a server whose port other
	// hosts can reach should set it lower. Default DefaultMaxConnsPerHost.
	MaxConnsPerHost int
	// MaxTombstones bounds resolved rooms kept for their TTL. When full, the
	// oldest completed room is forgotten first, then the oldest aborted one,
	// so memory stays bounded under any handoff rate. Default
	// DefaultMaxTombstones.
	MaxTombstones int
	// HeaderTimeout bounds how long a connection may take to send its
	// header, and how long writing the status byte may take. Default
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// PendingWait bounds how long a decode may wait for a room the prefill
	// side has not opened yet; it then gets ERROR. Once the room is open
	// there is no server-side timer: the prefill side's abort timeout is
	// authoritative. Default DefaultPendingWait.
	PendingWait time.Duration
	// AbortedTTL keeps an aborted room, so a decode arriving late gets ABORT
	// rather than ERROR. Default DefaultAbortedTTL.
	AbortedTTL time.Duration
	// CompletedTTL keeps a completed room, so a decode that connects just
	// after Complete still gets ACK. Default DefaultCompletedTTL.
	CompletedTTL time.Duration
	// IdleTimeout bounds how long a keep-alive connection (FlagKeepAlive,
	// used by Client) may sit between transfers before the server closes
	// it, silently. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// OnDecodeArrived is told once per room, for the first authenticated
	// decode connection (right token for its transfer and request id)
	// found there once the room is open and that decode's header has been
	// read; later connections for the same transfer (a retry, a duplicate)
	// only wait for the outcome. See the package documentation
	// for the order of events. It runs on that connection's goroutine,
	// never under the server's lock and never from inside Open, Complete or
	// Abort, so it may call them. Optional.
	OnDecodeArrived func(transferID, requestID uint64)
	// Logger receives protocol errors (warn) and connection noise (debug).
	// Default: discard.
	Logger *slog.Logger
	// Now is the clock for room TTLs and for spacing repeated warnings
	// (tests inject a fake one). Socket deadlines (HeaderTimeout,
	// PendingWait) always use the wall clock. Default time.Now.
	Now func() time.Time
}

// Validate reports the first field that is out of range, naming it.
func (c Config) Validate() error {
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("bootstrap config: Addr %q is not host:port: %w", c.Addr, err)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxRooms", c.MaxRooms}, {"MaxConns", c.MaxConns}, {"MaxConnsPerHost", c.MaxConnsPerHost}, {"MaxTombstones", c.MaxTombstones}} {
		if f.v < 0 {
			return fmt.Errorf("bootstrap config: %s must be >= 0 (0 means default), got %d", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"HeaderTimeout", c.HeaderTimeout}, {"PendingWait", c.PendingWait},
		{"AbortedTTL", c.AbortedTTL}, {"CompletedTTL", c.CompletedTTL}, {"IdleTimeout", c.IdleTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("bootstrap config: %s must be >= 0 (0 means default), got %v", f.name, f.v)
		}
	}
	if c.AdvertisedHost == "" {
		addr := c.Addr
		if addr == "" {
			addr = DefaultAddr
		}
		host, _, _ := net.SplitHostPort(addr)
		if isUnspecifiedHost(host) {
			return fmt.Errorf("bootstrap config: AdvertisedHost is required when Addr %q binds every interface; set it to a name or IP decode workers can reach", c.Addr)
		}
	} else if !isBareHost(c.AdvertisedHost) {
		return fmt.Errorf("bootstrap config: AdvertisedHost %q must be a bare host name or IP address, without brackets or a port (the port is the listener's); for example \"prefill-0\", \"10.0.0.7\" or \"::1\"", c.AdvertisedHost)
	} else if isUnspecifiedHost(c.AdvertisedHost) {
		return fmt.Errorf("bootstrap config: AdvertisedHost %q is not dialable; set it to a name or IP decode workers can reach", c.AdvertisedHost)
	}
	return nil
}

// isBareHost reports whether host can be joined with a port as it is: no
// brackets, and a colon only inside an IPv6 literal.
func isBareHost(host string) bool {
	if strings.ContainsAny(host, "[] \t/") {
		return false
	}
	if strings.Contains(host, ":") {
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	return true
}

func isUnspecifiedHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.MaxRooms == 0 {
		c.MaxRooms = DefaultMaxRooms
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxTombstones == 0 {
		c.MaxTombstones = DefaultMaxTombstones
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.PendingWait == 0 {
		c.PendingWait = DefaultPendingWait
	}
	if c.AbortedTTL == 0 {
		c.AbortedTTL = DefaultAbortedTTL
	}
	if c.CompletedTTL == 0 {
		c.CompletedTTL = DefaultCompletedTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Errors returned by Server methods, wrapped with the transfer id; branch
// with errors.Is.
var (
	ErrClosed          = errors.New("transfer server is closed")
	ErrRoomsFull       = errors.New("transfer server room limit reached")
	ErrRoomExists      = errors.New("room already exists (transfer ids are never reused)")
	ErrUnknownTransfer = errors.New("no open room for this transfer")
	ErrAlreadyResolved = errors.New("room already resolved with the other outcome")
	ErrNotStarted      = errors.New("transfer server not started")
)

type roomState uint8

const (
	roomPending   roomState = iota // a decode is waiting, Open not called yet
	roomOpen                       // prefill holds KV, outcome unknown
	roomCompleted                  // tombstone: ACK
	roomAborted                    // tombstone: ABORT
)

type room struct {
	state   roomState
	arrived bool      // OnDecodeArrived is due or done; never again
	expires time.Time // tombstones only, on the Config.Now clock
	waiters []*waiter
}

func (r *room) resolved() bool { return r.state == roomCompleted || r.state == roomAborted }

func (r *room) outcome() Status {
	if r.state == roomCompleted {
		return StatusACK
	}
	return StatusAbort
}

// waiter is one decode connection parked on a room. Every field is guarded
// by Server.mu, and so is every SetReadDeadline on its conn: that is what
// makes the wake-ups below race-free.
type waiter struct {
	conn         net.Conn
	requestID    uint64
	notify       bool      // the room is open and OnDecodeArrived is due
	done         bool      // status is final
	status       Status    // valid when done
	pendingUntil time.Time // wall clock; only while the room is pending
}

type tombstone struct {
	id      uint64
	expires time.Time
}

// fifo is a queue of tombstones. Every tombstone of one kind has the same
// TTL, so expiry order is insertion order and no heap is needed.
type fifo struct {
	items []tombstone
	head  int
}

func (q *fifo) push(t tombstone) { q.items = append(q.items, t) }
func (q *fifo) len() int         { return len(q.items) - q.head }
func (q *fifo) peek() tombstone  { return q.items[q.head] }

func (q *fifo) pop() tombstone {
	t := q.items[q.head]
	q.head++
	if q.head >= 1024 && q.head*2 >= len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return t
}

// Stats is a snapshot of a server's occupancy.
type Stats struct {
	OpenRooms    int // opened by the prefill side, not yet resolved
	PendingRooms int // a decode waits, the prefill side has not opened
	Tombstones   int // resolved rooms kept for their TTL
	Conns        int // decode connections being served
	Waiting      int // of Conns, authenticated decodes parked in a room
}

// Server is one prefill worker's transfer server. Build it with New (then
// Start) or Listen; stop it with Close. All methods are safe for concurrent
// use.
type Server struct {
	cfg  Config
	log  *slog.Logger
	done chan struct{} // closed by Close, wakes the accept back-off
	// key derives the transfer tokens; it never leaves the process.
	key [32]byte

	wg sync.WaitGroup

	mu         sync.Mutex
	ln         net.Listener
	advHost    string
	port       int
	started    bool
	closed     bool
	rooms      map[uint64]*room
	open       int
	pending    int
	tombstones int
	completedQ fifo
	abortedQ   fifo
	conns      map[net.Conn]*connInfo
	live       int            // conns not evicted
	hostConns  map[string]int // conns not evicted, per remote IP

	// listen binds the listener; tests swap it to bind where Addr cannot.
	listen func(network, address string) (net.Listener, error)
	// Warnings a flood would repeat once per connection, spaced by
	// limitWarnEvery.
	evictGate, fullGate, refuseGate warnGate
}

// limitWarnEvery spaces the warnings a flood of connections would
// otherwise repeat once per connection.
const limitWarnEvery = 10 * time.Second

// connPhase says what a connection is doing, which decides whether it may
// be evicted at a connection limit and whether it is owed a status byte.
type connPhase uint8

const (
	// phaseHeader: reading a header, not authenticated; evictable, and
	// answered ERROR when evicted.
	phaseHeader connPhase = iota
	// phaseIdle: a keep-alive connection between transfers; evictable, and
	// closed without a byte (its client sent nothing to answer).
	phaseIdle
	// phaseWaiting: authenticated and parked in a room; never evicted.
	phaseWaiting
)

type connInfo struct {
	host    string
	phase   connPhase
	since   time.Time // wall clock, when the phase began
	evicted bool
}

// warnGate lets one warning through per limitWarnEvery and counts the
// ones it held back.
type warnGate struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (g *warnGate) allow(now time.Time) (ok bool, suppressed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() && now.Sub(g.last) < limitWarnEvery {
		g.suppressed++
		return false, 0
	}
	suppressed, g.suppressed, g.last = g.suppressed, 0, now
	return true, suppressed
}

// New validates cfg and returns a server that is not yet listening.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		done:      make(chan struct{}),
		rooms:     make(map[uint64]*room),
		conns:     make(map[net.Conn]*connInfo),
		hostConns: make(map[string]int),
		listen:    net.Listen,
	}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, fmt.Errorf("bootstrap: token key: %w", err)
	}
	return s, nil
}

// Listen is New followed by Start.
func Listen(cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start binds Config.Addr and serves in the background until Close.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("bootstrap: Start called twice")
	}
	ln, err := s.listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("bootstrap: bind transfer server on %s: %w", s.cfg.Addr, err)
	}
	host, portStr, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("bootstrap: listener address %s: %w", ln.Addr(), err)
	}
	adv := s.cfg.AdvertisedHost
	if adv == "" {
		// Validate refuses wildcard binds it can see; a name that resolved
		// to one shows only now.
		if isUnspecifiedHost(host) {
			_ = ln.Close()
			return fmt.Errorf("bootstrap: Addr %q bound every interface (%s), which decode workers cannot dial; set AdvertisedHost to a name or IP they can reach", s.cfg.Addr, ln.Addr())
		}
		adv = host
	}
	port, _ := strconv.Atoi(portStr)
	s.ln, s.port, s.started = ln, port, true
	s.advHost = adv
	s.wg.Add(1)
	go s.acceptLoop(ln)
	s.log.Debug("bootstrap: transfer server listening", "addr", ln.Addr().String(), "advertised_host", s.advHost)
	return nil
}

// Addr is the bound address ("host:port"), or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// AdvertisedHost is the host decode workers dial: Config.AdvertisedHost, or
// the bound host when that was empty. "" before Start.
func (s *Server) AdvertisedHost() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.advHost
}

// Port is the bound port (resolved when Addr asked for port 0), or 0 before
// Start.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// AdvertisedAddr is AdvertisedHost:Port, the address decode workers dial.
func (s *Server) AdvertisedAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort(s.advHost, strconv.Itoa(s.port))
}

// Token is the secret a decode must present to take part in the transfer
// for the given request: a MAC of both ids under a key drawn from
// crypto/rand when the server was built, so it cannot be guessed, does not
// open any other transfer or request, and needs no state (a decode that
// arrives before Open is checked at once too). The handoff params carry it.
func (s *Server) Token(transferID, requestID uint64) Token {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], transferID)
	binary.LittleEndian.PutUint64(b[8:], requestID)
	m := hmac.New(sha256.New, s.key[:])
	m.Write(b[:])
	var t Token
	copy(t[:], m.Sum(nil))
	return t
}

func (s *Server) authentic(h Header) bool {
	want := s.Token(h.TransferID, h.RequestID)
	return hmac.Equal(want[:], h.Token[:])
}

// VLLMParams returns the handoff params that point the decode of requestID
// at this server for the given transfer, with the transfer's token.
func (s *Server) VLLMParams(transferID, requestID uint64) VLLMParams {
	tok := s.Token(transferID, requestID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return VLLMParams{TransferID: transferID, PrefillHost: s.advHost, PrefillPort: s.port, TransferToken: tok}
}

// SGLangParams returns SGLang-shaped handoff params for the given room and
// request, with the room's token.
func (s *Server) SGLangParams(room, requestID uint64) SGLangParams {
	tok := s.Token(room, requestID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return SGLangParams{BootstrapHost: s.advHost, BootstrapPort: s.port, BootstrapRoom: room, BootstrapToken: tok}
}

// Stats returns the current occupancy.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{OpenRooms: s.open, PendingRooms: s.pending, Tombstones: s.tombstones, Conns: len(s.conns)}
	for _, ci := range s.conns {
		if ci.phase == phaseWaiting {
			st.Waiting++
		}
	}
	return st
}

// Open registers the room for transferID: the prefill side holds the KV.
// Decodes already waiting for it are woken and reported through
// OnDecodeArrived. Opening an id twice, or an id already resolved, is an
// error (ErrRoomExists): ids are never reused.
func (s *Server) Open(transferID uint64) error {
	if transferID == 0 {
		return fmt.Errorf("bootstrap: open: %w", ErrZeroTransfer)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return fmt.Errorf("transfer %d: open room: %w", transferID, err)
	}
	s.sweepLocked(s.cfg.Now())
	r := s.rooms[transferID]
	if r != nil && r.state != roomPending {
		return fmt.Errorf("transfer %d: open room: %w", transferID, ErrRoomExists)
	}
	if s.open >= s.cfg.MaxRooms {
		return fmt.Errorf("transfer %d: open room: %w (MaxRooms=%d open rooms); raise MaxRooms or resolve rooms sooner", transferID, ErrRoomsFull, s.cfg.MaxRooms)
	}
	s.open++
	if r == nil {
		s.rooms[transferID] = &room{state: roomOpen}
		return nil
	}
	s.pending--
	r.state = roomOpen
	// The first decode parked here is the arrival; the others are woken
	// only to drop their PendingWait deadline.
	for i, w := range r.waiters {
		if i == 0 {
			w.notify, r.arrived = true, true
		}
		wake(w.conn)
	}
	return nil
}

// Complete resolves an open room with ACK: every waiting decode gets ACK,
// and decodes connecting within CompletedTTL get ACK too. Completing a
// completed room is a no-op; completing an aborted one is
// ErrAlreadyResolved; completing a room never opened is ErrUnknownTransfer.
func (s *Server) Complete(transferID uint64) error {
	return s.resolve(transferID, roomCompleted)
}

// Abort resolves a room with ABORT: every waiting decode gets ABORT, and
// decodes connecting within AbortedTTL get ABORT too. Abort also works on an
// id never opened (the source gave up before holding), so a decode that
// waits for it or comes later gets ABORT rather than ERROR. Aborting an
// aborted room is a no-op; aborting a completed one is ErrAlreadyResolved.
func (s *Server) Abort(transferID uint64) error {
	return s.resolve(transferID, roomAborted)
}

func (s *Server) resolve(id uint64, to roomState) error {
	verb := "complete"
	if to == roomAborted {
		verb = "abort"
	}
	if id == 0 {
		return fmt.Errorf("bootstrap: %s: %w", verb, ErrZeroTransfer)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return fmt.Errorf("transfer %d: %s room: %w", id, verb, err)
	}
	now := s.cfg.Now()
	s.sweepLocked(now)
	r := s.rooms[id]
	if r != nil && r.resolved() && !now.Before(r.expires) {
		// Expired but not swept yet (the clock went backwards): forget it.
		delete(s.rooms, id)
		s.tombstones--
		r = nil
	}
	switch {
	case r == nil:
		if to == roomCompleted {
			return fmt.Errorf("transfer %d: complete room: %w (never opened, or resolved longer than its TTL ago)", id, ErrUnknownTransfer)
		}
		r = &room{}
		s.rooms[id] = r
	case r.state == roomPending:
		if to == roomCompleted {
			return fmt.Errorf("transfer %d: complete room: %w (a decode is waiting but Open was never called)", id, ErrUnknownTransfer)
		}
		s.pending--
	case r.state == roomOpen:
		s.open--
	case r.state == to:
		return nil
	default:
		return fmt.Errorf("transfer %d: %s room: %w (it was %s)", id, verb, ErrAlreadyResolved, r.outcome())
	}
	r.state = to
	ttl, q := s.cfg.CompletedTTL, &s.completedQ
	if to == roomAborted {
		ttl, q = s.cfg.AbortedTTL, &s.abortedQ
	}
	r.expires = now.Add(ttl)
	q.push(tombstone{id: id, expires: r.expires})
	s.tombstones++
	st := r.outcome()
	for _, w := range r.waiters {
		w.done, w.status = true, st
		wake(w.conn)
	}
	r.waiters = nil
	s.trimTombstonesLocked()
	return nil
}

// Reset forgets every room: decodes still waiting in one get ERROR, and
// the tombstones go, so that transfer ids may start over. It is for a
// worker whose work all ended and that starts afresh for one router (a
// coupled session's new engine), whose ids then start at 1 as in process.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rooms {
		for _, w := range r.waiters {
			w.done, w.status = true, StatusError
			wake(w.conn)
		}
	}
	clear(s.rooms)
	s.open, s.pending, s.tombstones = 0, 0, 0
	s.completedQ, s.abortedQ = fifo{}, fifo{}
}

func (s *Server) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	if !s.started {
		return ErrNotStarted
	}
	return nil
}

// sweepLocked forgets tombstones whose TTL has passed. It runs on every
// call that takes the lock, which bounds the work per call to what expired
// since the last one, so no janitor goroutine is needed. Lookups also check
// expiry, so correctness does not depend on when a sweep runs.
func (s *Server) sweepLocked(now time.Time) {
	for _, q := range []*fifo{&s.completedQ, &s.abortedQ} {
		for q.len() > 0 && !now.Before(q.peek().expires) {
			s.forgetLocked(q.pop())
		}
	}
}

func (s *Server) trimTombstonesLocked() {
	for s.tombstones > s.cfg.MaxTombstones && s.completedQ.len()+s.abortedQ.len() > 0 {
		q := &s.completedQ
		if q.len() == 0 {
			q = &s.abortedQ
		}
		t := q.pop()
		s.log.Debug("bootstrap: tombstone limit reached, forgetting a resolved room early", "transfer_id", t.id, "max_tombstones", s.cfg.MaxTombstones)
		s.forgetLocked(t)
	}
}

// forgetLocked drops a queued tombstone unless the room was dropped already
// (a lookup found it expired).
func (s *Server) forgetLocked(t tombstone) {
	if r := s.rooms[t.id]; r != nil && r.resolved() && r.expires.Equal(t.expires) {
		delete(s.rooms, t.id)
		s.tombstones--
	}
}

// pastDeadline wakes a goroutine blocked in Read without closing the conn.
var pastDeadline = time.Unix(1, 0)

func wake(c net.Conn) { _ = c.SetReadDeadline(pastDeadline) }

// Close stops accepting, answers ERROR to every connection still being
// served, and returns once every goroutine the server started has exited.
// Later calls return nil; Open, Complete and Abort return ErrClosed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.done)
	for _, r := range s.rooms {
		for _, w := range r.waiters {
			w.done, w.status = true, StatusError
		}
	}
	for c := range s.conns {
		wake(c)
	}
	ln := s.ln
	s.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("bootstrap: close listener: %w", err)
	}
	return nil
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Typically EMFILE: back off instead of spinning, but stay
			// responsive to Close.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("bootstrap: accept failed, backing off", "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		host := remoteHost(c)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		limit, evicted, ok := s.admitLocked(host)
		if !ok {
			s.mu.Unlock()
			s.warnLimit(&s.fullGate, limit, host, "refused: every connection is an authenticated decode")
			s.writeStatus(c, StatusError)
			_ = c.Close()
			continue
		}
		ci := &connInfo{host: host, phase: phaseHeader, since: time.Now()}
		s.conns[c] = ci
		s.live++
		s.hostConns[host]++
		s.wg.Add(1)
		s.mu.Unlock()
		if evicted {
			s.warnLimit(&s.evictGate, limit, host, "evicted the oldest unauthenticated connection")
		}
		go s.serveConn(c, ci)
	}
}

// admitLocked makes room for a connection from host under MaxConnsPerHost
// and MaxConns, evicting the oldest unauthenticated connection where a
// limit is reached. It reports the limit it hit, whether it evicted, and
// whether the connection may be admitted.
func (s *Server) admitLocked(host string) (limit string, evicted, ok bool) {
	if s.hostConns[host] >= s.cfg.MaxConnsPerHost {
		if !s.evictLocked(host) {
			return "MaxConnsPerHost", false, false
		}
		limit, evicted = "MaxConnsPerHost", true
	}
	if s.live >= s.cfg.MaxConns {
		if !s.evictLocked("") {
			return "MaxConns", evicted, false
		}
		limit, evicted = "MaxConns", true
	}
	return limit, evicted, true
}

// evictLocked evicts the connection that has been unauthenticated (reading
// a header, or idle) the longest, from host or from anywhere when host is
// "". Its goroutine notices at once and ends it; it stops counting against
// the limits now.
func (s *Server) evictLocked(host string) bool {
	var victim net.Conn
	var vi *connInfo
	for c, ci := range s.conns {
		if ci.evicted || ci.phase == phaseWaiting || (host != "" && ci.host != host) {
			continue
		}
		if vi == nil || ci.since.Before(vi.since) {
			victim, vi = c, ci
		}
	}
	if vi == nil {
		return false
	}
	vi.evicted = true
	s.live--
	s.dropHostLocked(vi.host)
	wake(victim)
	return true
}

func (s *Server) dropHostLocked(host string) {
	if s.hostConns[host]--; s.hostConns[host] <= 0 {
		delete(s.hostConns, host)
	}
}

func remoteHost(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// warnLimit logs a connection limit being hit, at most once per
// limitWarnEvery for each gate (evictions and refusals apart, so a flood
// of evictions does not hide a refused decode), counting the times in
// between.
func (s *Server) warnLimit(g *warnGate, limit, host, what string) {
	if ok, suppressed := g.allow(s.cfg.Now()); ok {
		s.log.Warn("bootstrap: connection limit reached", "limit", limit, "remote_host", host, "action", what,
			"max_conns", s.cfg.MaxConns, "max_conns_per_host", s.cfg.MaxConnsPerHost,
			"suppressed", suppressed, "warn_every", limitWarnEvery)
	}
}

// warnRefused logs a refused header, rate-limited like warnLimit: a
// scanner or an attacker would otherwise write one line per attempt.
func (s *Server) warnRefused(msg string, args ...any) {
	if ok, suppressed := s.refuseGate.allow(s.cfg.Now()); ok {
		s.log.Warn(msg, append(args, "suppressed", suppressed, "warn_every", limitWarnEvery)...)
	}
}

func (s *Server) serveConn(c net.Conn, ci *connInfo) {
	defer s.wg.Done()
	s.serve(c, ci)
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	if !ci.evicted {
		s.live--
		s.dropHostLocked(ci.host)
	}
	s.mu.Unlock()
}

// serve answers the connection's headers: one, or one after another while
// the client asks for keep-alive and each transfer ends in ACK or ABORT.
func (s *Server) serve(c net.Conn, ci *connInfo) {
	for first := true; ; first = false {
		h, ok := s.readHeader(c, ci, first)
		if !ok {
			return
		}
		st, answer := s.await(c, ci, h)
		if !answer {
			return
		}
		if !s.writeStatus(c, st) || h.Flags&FlagKeepAlive == 0 || (st != StatusACK && st != StatusAbort) {
			return
		}
	}
}

func (s *Server) writeStatus(c net.Conn, st Status) bool {
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.HeaderTimeout))
	if _, err := c.Write([]byte{byte(st)}); err != nil {
		s.log.Debug("bootstrap: could not write status", "remote", c.RemoteAddr().String(), "status", st.String(), "err", err)
		return false
	}
	return true
}

// enterPhase moves the connection to phase with a read deadline of d from
// now, under the lock that eviction and Close take, so a wake-up is never
// lost. It reports false when the connection must end instead.
func (s *Server) enterPhase(c net.Conn, ci *connInfo, phase connPhase, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || ci.evicted {
		return false
	}
	now := time.Now()
	ci.phase, ci.since = phase, now
	_ = c.SetReadDeadline(now.Add(d))
	return true
}

func (s *Server) ending(ci *connInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || ci.evicted
}

// readHeader reads, checks and authenticates the next header. On false the
// connection ends; it has already been answered when an answer was owed.
// Between keep-alive transfers nothing is owed: the client sent nothing,
// and a stray byte would be read as the answer to its next header.
func (s *Server) readHeader(c net.Conn, ci *connInfo, first bool) (Header, bool) {
	remote := c.RemoteAddr().String()
	var buf [HeaderSize]byte
	got := 0
	if !first {
		if !s.enterPhase(c, ci, phaseIdle, s.cfg.IdleTimeout) {
			return Header{}, false
		}
		n, err := c.Read(buf[:1])
		if n == 0 {
			s.log.Debug("bootstrap: keep-alive connection ended between transfers", "remote", remote, "err", err)
			return Header{}, false
		}
		got = n
	}
	refuse := func() (Header, bool) {
		s.writeStatus(c, StatusError)
		return Header{}, false
	}
	if !s.enterPhase(c, ci, phaseHeader, s.cfg.HeaderTimeout) {
		return refuse()
	}
	// The magic and version come first, so a stray client (an HTTP probe,
	// a version-1 decode) is refused on its first bytes, not at
	// HeaderTimeout.
	_, err := io.ReadFull(c, buf[got:prefixSize])
	if err == nil {
		if perr := checkPrefix(buf[:prefixSize]); perr != nil {
			s.warnRefused("bootstrap: refusing connection", "remote", remote, "err", perr)
			return refuse()
		}
		_, err = io.ReadFull(c, buf[prefixSize:])
	}
	if err != nil {
		switch {
		case s.ending(ci):
			return refuse()
		case isTimeout(err):
			s.warnRefused("bootstrap: no complete header within HeaderTimeout", "remote", remote, "header_timeout", s.cfg.HeaderTimeout)
			return refuse()
		default:
			s.log.Debug("bootstrap: decode left before sending its header", "remote", remote, "err", err)
			return Header{}, false
		}
	}
	h, err := DecodeHeader(buf[:])
	if err != nil {
		s.warnRefused("bootstrap: refusing connection", "remote", remote, "err", err)
		return refuse()
	}
	if !s.authentic(h) {
		s.warnRefused("bootstrap: refusing header with a wrong token for its transfer and request",
			"remote", remote, "transfer_id", h.TransferID, "request_id", h.RequestID)
		return refuse()
	}
	return h, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// await parks the connection on its room until the outcome is known. The
// goroutine sits in Read so that a client hanging up is noticed at once;
// Open, resolve and Close wake it by moving the read deadline into the past
// after recording, under the lock, why.
func (s *Server) await(c net.Conn, ci *connInfo, h Header) (Status, bool) {
	id := h.TransferID
	remote := c.RemoteAddr().String()
	s.mu.Lock()
	if s.closed || ci.evicted {
		s.mu.Unlock()
		return StatusError, true
	}
	ci.phase = phaseWaiting
	now := s.cfg.Now()
	r := s.rooms[id]
	if r != nil && r.resolved() {
		if now.Before(r.expires) {
			st := r.outcome()
			s.mu.Unlock()
			return st, true
		}
		delete(s.rooms, id)
		s.tombstones--
		s.mu.Unlock()
		s.log.Warn("bootstrap: decode arrived after its room expired", "transfer_id", id, "request_id", h.RequestID, "remote", remote)
		return StatusError, true
	}
	s.sweepLocked(now)
	if r == nil {
		r = &room{state: roomPending}
		s.rooms[id] = r
		s.pending++
	}
	w := &waiter{conn: c, requestID: h.RequestID}
	if r.state == roomOpen && !r.arrived {
		w.notify, r.arrived = true, true
	}
	if r.state == roomPending {
		w.pendingUntil = time.Now().Add(s.cfg.PendingWait)
	}
	r.waiters = append(r.waiters, w)
	s.mu.Unlock()

	var one [1]byte
	for {
		s.mu.Lock()
		if w.done {
			s.mu.Unlock()
			return w.status, true
		}
		notify := w.notify
		w.notify = false
		if r.state == roomPending {
			_ = c.SetReadDeadline(w.pendingUntil)
		} else {
			_ = c.SetReadDeadline(time.Time{})
		}
		s.mu.Unlock()

		if notify {
			if s.cfg.OnDecodeArrived != nil {
				s.cfg.OnDecodeArrived(id, h.RequestID)
			}
			continue
		}

		n, err := c.Read(one[:])
		s.mu.Lock()
		switch {
		case w.done || w.notify:
			s.mu.Unlock()
			continue
		case n > 0:
			s.dropWaiterLocked(id, r, w)
			s.mu.Unlock()
			s.log.Warn("bootstrap: decode sent bytes after its header", "transfer_id", id, "remote", remote)
			return StatusError, true
		case isTimeout(err):
			if r.state != roomPending || time.Now().Before(w.pendingUntil) {
				s.mu.Unlock()
				continue
			}
			s.dropWaiterLocked(id, r, w)
			s.mu.Unlock()
			s.log.Warn("bootstrap: no room opened for transfer within PendingWait", "transfer_id", id, "request_id", h.RequestID, "remote", remote, "pending_wait", s.cfg.PendingWait)
			return StatusError, true
		default:
			s.dropWaiterLocked(id, r, w)
			s.mu.Unlock()
			s.log.Debug("bootstrap: decode hung up while waiting", "transfer_id", id, "remote", remote, "err", err)
			return 0, false
		}
	}
}

func (s *Server) dropWaiterLocked(id uint64, r *room, w *waiter) {
	for i, x := range r.waiters {
		if x == w {
			r.waiters = append(r.waiters[:i], r.waiters[i+1:]...)
			break
		}
	}
	if r.state == roomPending && len(r.waiters) == 0 {
		delete(s.rooms, id)
		s.pending--
	}
}
