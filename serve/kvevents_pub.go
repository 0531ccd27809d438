package serve

import (
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// pubSocket is a ZMQ PUB socket: it binds, speaks ZMTP through zmq4's
// connections (zmq4.Open) and sends each message to every subscriber whose
// subscriptions match its first frame by prefix. Each subscriber has a
// queue of at most hwm messages and a goroutine writing it out; a
// subscriber whose queue is full misses the message, as a ZMQ PUB drops at
// its high-water mark, so publish never waits on the network. (zmq4's own
// PUB socket queues without bound unless told a high-water mark, shares
// one queue among all subscribers, and keeps a goroutine after Close.)
type pubSocket struct {
	ln      net.Listener
	hwm     int
	maxSubs int
	wg      sync.WaitGroup

	mu       sync.Mutex
	subs     map[*pubSub]struct{}
	greeting map[net.Conn]struct{} // connections not yet through their greeting
	closed   bool
	dropped  uint64
}

// pubSub is one subscriber connection.
type pubSub struct {
	conn   *zmq4.Conn
	q      chan [][]byte
	done   chan struct{}
	once   sync.Once
	topics []string // guarded by pubSocket.mu
}

// pubHandshakeTimeout bounds a connection's ZMTP greeting.
const pubHandshakeTimeout = 5 * time.Second

func listenPub(addr string, hwm, maxSubs int) (*pubSocket, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &pubSocket{ln: ln, hwm: hwm, maxSubs: maxSubs, subs: map[*pubSub]struct{}{}, greeting: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *pubSocket) addr() net.Addr { return p.ln.Addr() }

func (p *pubSocket) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve greets one subscriber, then reads its subscriptions while a second
// goroutine writes its queue out.
func (p *pubSocket) serve(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.greeting[c] = struct{}{}
	p.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(pubHandshakeTimeout))
	conn, err := zmq4.Open(c, null.Security(), zmq4.Pub, zmq4.SocketIdentity(""), true, nil)
	p.mu.Lock()
	delete(p.greeting, c)
	p.mu.Unlock()
	if err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	s := &pubSub{conn: conn, q: make(chan [][]byte, p.hwm), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || len(p.subs) >= p.maxSubs {
		p.mu.Unlock()
		_ = conn.Close()
		return
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go p.write(s)
	defer p.drop(s)
	for {
		msg, err := conn.RecvMsg()
		if err != nil {
			return
		}
		// A subscription is a one-frame message: 1 then the topic
		// prefix to add, or 0 then one to remove.
		if len(msg.Frames) != 1 || len(msg.Frames[0]) == 0 {
			continue
		}
		f := msg.Frames[0]
		topic := string(f[1:])
		p.mu.Lock()
		switch f[0] {
		case 1:
			s.topics = append(s.topics, topic)
		case 0:
			for i, t := range s.topics {
				if t == topic {
					s.topics = append(s.topics[:i], s.topics[i+1:]...)
					break
				}
			}
		}
		p.mu.Unlock()
	}
}

func (p *pubSocket) write(s *pubSub) {
	defer p.wg.Done()
	defer p.drop(s)
	for {
		select {
		case frames := <-s.q:
			if err := s.conn.SendMsg(zmq4.NewMsgFrom(frames...)); err != nil {
				return
			}
		case <-s.done:
			return
		}
	}
}

// drop ends a subscriber: its connection closes, so both its goroutines
// return.
func (p *pubSocket) drop(s *pubSub) {
	s.once.Do(func() {
		p.mu.Lock()
		delete(p.subs, s)
		p.mu.Unlock()
		close(s.done)
		_ = s.conn.Close()
	})
}

// publish queues frames for every subscriber of topic, never waiting: a
// subscriber whose queue is full misses them.
func (p *pubSocket) publish(topic []byte, frames [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		if !s.wants(topic) {
			continue
		}
		select {
		case s.q <- frames:
		default:
			p.dropped++
		}
	}
}

func (s *pubSub) wants(topic []byte) bool {
	for _, t := range s.topics {
		if strings.HasPrefix(string(topic), t) {
			return true
		}
	}
	return false
}

// stats are the subscribers that subscribed to something and the
// messages dropped for slow ones.
func (p *pubSocket) stats() (subs int, dropped uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		if len(s.topics) > 0 {
			subs++
		}
	}
	return subs, p.dropped
}

// close stops accepting, ends every subscriber and waits for their
// goroutines.
func (p *pubSocket) close() {
	p.mu.Lock()
	p.closed = true
	subs := make([]*pubSub, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	for c := range p.greeting {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, s := range subs {
		p.drop(s)
	}
	p.wg.Wait()
}
