package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/kv"
)

// Defaults of KVEventsOptions, in one place.
const (
	// DefaultKVEventsBuffer is how many batches each publisher keeps for
	// replay, as vLLM's buffer_steps.
	DefaultKVEventsBuffer = 10000
	// DefaultKVEventsHWM is how many batches may wait for one slow
	// subscriber before the next ones are dropped for it.
	DefaultKVEventsHWM = 10000
	// MaxKVEventsSubscribers bounds the subscribers of one publisher; a
	// connection past it is closed at once.
	MaxKVEventsSubscribers = 256
)

// KVEventsOptions say where and how a Server publishes its workers' KV
// events over ZMQ, as vLLM's --kv-events-config does.
type KVEventsOptions struct {
	// Endpoint is the first publisher's address, tcp://HOST:PORT (HOST *
	// for every interface). Publisher i (the i-th worker rank, in the
	// order of Stats().Workers) binds PORT+i. Empty publishes nothing.
	// Port 0 gives every publisher a free port of its own.
	Endpoint string
	// ReplayEndpoint is the first replay socket's address: replay socket
	// i binds its PORT+i. Default: Endpoint's host and port + the number
	// of publishers, the port after the last publisher's.
	ReplayEndpoint string
	// Topic is the first frame of every message (default "", as vLLM's).
	Topic string
	// Buffer is how many batches each publisher keeps for replay (default
	// DefaultKVEventsBuffer).
	Buffer int
	// HWM is how many batches may queue for one subscriber that reads
	// slower than they come; past it that subscriber misses batches, as
	// a ZMQ PUB socket drops at its high-water mark (default
	// DefaultKVEventsHWM).
	HWM int
}

// KVEventPublisher describes one worker rank's publisher.
type KVEventPublisher struct {
	// Worker and DPRank name the worker rank, as Stats().Workers does.
	Worker string
	DPRank int
	// Endpoint and ReplayEndpoint are the bound addresses, tcp://HOST:PORT.
	Endpoint       string
	ReplayEndpoint string
	// Published is the number of batches published: the next sequence
	// number.
	Published uint64
	// Subscribers counts the connected subscribers that subscribed to a
	// prefix of the topic.
	Subscribers int
	// Dropped counts batches a slow subscriber missed (summed over them).
	Dropped uint64
}

// tcpEndpoint is a parsed tcp://HOST:PORT.
type tcpEndpoint struct {
	host string
	port int
}

func parseTCPEndpoint(field, s string) (tcpEndpoint, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" {
		return tcpEndpoint{}, fmt.Errorf("%s: want tcp://HOST:PORT (e.g. tcp://127.0.0.1:5557, or tcp://*:5557 for every interface), got %q", field, s)
	}
	host, ps, err := net.SplitHostPort(u.Host)
	if err != nil {
		return tcpEndpoint{}, fmt.Errorf("%s: want tcp://HOST:PORT, got %q: %w", field, s, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return tcpEndpoint{}, fmt.Errorf("%s: port %q: want 0 to 65535", field, ps)
	}
	if host == "*" {
		host = ""
	}
	return tcpEndpoint{host: host, port: port}, nil
}

// at is the address of the i-th socket from e: its port plus i (port 0
// stays 0, a free port each).
func (e tcpEndpoint) at(i int) (string, error) {
	p := e.port
	if p != 0 {
		p += i
		if p > 65535 {
			return "", fmt.Errorf("port %d + %d is past 65535", e.port, i)
		}
	}
	return net.JoinHostPort(e.host, strconv.Itoa(p)), nil
}

// kvEventsFor makes the publishers opts.KVEvents asks for, if any, and has
// cfg's cluster feed them.
func kvEventsFor(cfg *cluster.Config, opts Options) (*kvEvents, error) {
	if opts.KVEvents.Endpoint == "" {
		return nil, nil
	}
	if cfg.Transport != nil {
		return nil, errors.New("kv events: published for in-process workers only; a config with a transport has its workers publish on NATS")
	}
	k, err := newKVEvents(opts.KVEvents, opts.Logger)
	if err != nil {
		return nil, err
	}
	cfg.OnKVEvents = k.pass
	return k, nil
}

// startKVEvents binds the publishers, one per worker rank.
func (s *Server) startKVEvents() error {
	if s.kv == nil {
		return nil
	}
	return s.kv.start(s.c.Stats().Workers, s.c.BlockSize())
}

// KVEventPublishers describes the server's KV event publishers, one per
// worker rank in the order of the cluster's Stats().Workers; none without
// Options.KVEvents.
func (s *Server) KVEventPublishers() []KVEventPublisher {
	if s.kv == nil {
		return nil
	}
	return s.kv.publishers()
}

// kvEvents is a Server's set of publishers, one per worker rank.
type kvEvents struct {
	opts KVEventsOptions
	log  *slog.Logger
	pubs atomic.Pointer[[]*kvPublisher]
}

// newKVEvents checks opts and makes the set the cluster's OnKVEvents
// feeds; start binds its sockets once the cluster exists.
func newKVEvents(opts KVEventsOptions, log *slog.Logger) (*kvEvents, error) {
	if _, err := parseTCPEndpoint("kv events endpoint", opts.Endpoint); err != nil {
		return nil, err
	}
	if opts.ReplayEndpoint != "" {
		if _, err := parseTCPEndpoint("kv events replay endpoint", opts.ReplayEndpoint); err != nil {
			return nil, err
		}
	}
	if opts.Buffer < 0 || opts.HWM < 0 {
		return nil, fmt.Errorf("kv events: buffer %d and hwm %d: want 0 (the default) or more", opts.Buffer, opts.HWM)
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultKVEventsBuffer
	}
	if opts.HWM == 0 {
		opts.HWM = DefaultKVEventsHWM
	}
	return &kvEvents{opts: opts, log: log}, nil
}

// start binds a publisher and a replay socket for each of workers.
func (k *kvEvents) start(workers []cluster.WorkerStats, blockSize int) error {
	ep, _ := parseTCPEndpoint("", k.opts.Endpoint)
	rep := ep
	rep.port = ep.port + len(workers)
	if ep.port == 0 {
		rep.port = 0
	}
	if k.opts.ReplayEndpoint != "" {
		rep, _ = parseTCPEndpoint("", k.opts.ReplayEndpoint)
	}
	pubs := make([]*kvPublisher, 0, len(workers))
	for i, w := range workers {
		addr, err := ep.at(i)
		if err == nil {
			var raddr string
			raddr, err = rep.at(i)
			if err == nil {
				var p *kvPublisher
				p, err = newKVPublisher(w, blockSize, addr, raddr, k.opts, k.log)
				if err == nil {
					pubs = append(pubs, p)
					continue
				}
			}
		}
		for _, p := range pubs {
			p.close()
		}
		return fmt.Errorf("kv events of %s rank %d: %w", w.Name, w.DPRank, err)
	}
	k.pubs.Store(&pubs)
	return nil
}

// pass publishes one worker pass's events; it runs on the cluster's loop
// and never blocks on a subscriber.
func (k *kvEvents) pass(p cluster.KVPass) {
	pubs := k.pubs.Load()
	if pubs == nil || p.Worker >= len(*pubs) {
		return
	}
	(*pubs)[p.Worker].publish(p)
}

func (k *kvEvents) close() {
	pubs := k.pubs.Swap(nil)
	if pubs == nil {
		return
	}
	for _, p := range *pubs {
		p.close()
	}
}

func (k *kvEvents) publishers() []KVEventPublisher {
	pubs := k.pubs.Load()
	if pubs == nil {
		return nil
	}
	out := make([]KVEventPublisher, len(*pubs))
	for i, p := range *pubs {
		out[i] = p.describe()
	}
	return out
}

// kvPublisher publishes one worker rank's batches: a PUB socket, the
// replay buffer and a ROUTER socket answering replay requests from it.
type kvPublisher struct {
	name      string
	rank      int
	blockSize int
	topic     []byte
	pub       *pubSocket
	replay    zmq4.Socket
	cancel    context.CancelFunc
	done      chan struct{}
	log       *slog.Logger

	// mu guards the replay buffer, a ring of the last bufCap batches
	// (buf[seq % bufCap]), and next, the next batch's sequence number.
	mu     sync.Mutex
	buf    [][]byte
	bufCap int
	next   uint64

	// The encoder is the loop's alone.
	enc    *msgpack.Encoder
	encBuf bytes.Buffer
}

func newKVPublisher(w cluster.WorkerStats, blockSize int, addr, replayAddr string, opts KVEventsOptions, log *slog.Logger) (*kvPublisher, error) {
	pub, err := listenPub(addr, opts.HWM, MaxKVEventsSubscribers)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	replay := zmq4.NewRouter(ctx)
	if err := replay.Listen("tcp://" + replayAddr); err != nil {
		cancel()
		_ = replay.Close()
		pub.close()
		return nil, fmt.Errorf("replay socket: %w", err)
	}
	p := &kvPublisher{
		name: w.Name, rank: w.DPRank, blockSize: blockSize, topic: []byte(opts.Topic),
		pub: pub, replay: replay, cancel: cancel, done: make(chan struct{}),
		log:    log.With("worker", w.Name, "dp_rank", w.DPRank),
		bufCap: opts.Buffer,
	}
	p.enc = newKVEncoder(&p.encBuf)
	go p.serveReplay(ctx)
	return p, nil
}

func (p *kvPublisher) describe() KVEventPublisher {
	p.mu.Lock()
	n := p.next
	p.mu.Unlock()
	subs, dropped := p.pub.stats()
	return KVEventPublisher{
		Worker: p.name, DPRank: p.rank,
		Endpoint: "tcp://" + p.pub.addr().String(), ReplayEndpoint: "tcp://" + p.replay.Addr().String(),
		Published: n, Subscribers: subs, Dropped: dropped,
	}
}

// publish encodes the pass's events as one KVEventBatch, keeps it for
// replay and hands it to the subscribers' queues.
func (p *kvPublisher) publish(pass cluster.KVPass) {
	payload := p.encode(pass)
	p.mu.Lock()
	seq := p.next
	p.next++
	if len(p.buf) < p.bufCap {
		p.buf = append(p.buf, payload)
	} else {
		p.buf[seq%uint64(p.bufCap)] = payload
	}
	p.mu.Unlock()
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	p.pub.publish(p.topic, [][]byte{p.topic, seqb[:], payload})
}

// encode writes pass as vLLM's KVEventBatch: msgspec structs encoded as
// arrays in field order, each event's first element its type's tag, and
// fields with defaults left off the end when at their default:
//
//	[ts, [event, ...], data_parallel_rank]
//	["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]
//	["BlockRemoved", block_hashes, medium]
//	["AllBlocksCleared"]
//
// ts is wall-clock Unix seconds, as vLLM stamps its batches. Block hashes
// are the worker's sequence hashes (the keys the kv router indexes).
// medium is the event's kv.Medium: "GPU" for the GPU pool, "CPU" for the
// host tier (num_g2_blocks), "DISK" for the disk tier (num_g3_blocks),
// "EXTERNAL" for object storage (enable_g4_storage). token_ids are the
// ids of the stored blocks' tokens, block_size per block in the order of
// block_hashes (cluster.KVPass.Tokens); a pass without them (a KVPass
// built by hand) sends an empty array. A BlockStored of a lower tier has
// no parent and no token_ids, as vLLM's CPU offloading announces the
// blocks it copies to host memory.
func (p *kvPublisher) encode(pass cluster.KVPass) []byte {
	p.encBuf.Reset()
	e := p.enc
	toks := pass.Tokens
	_ = e.EncodeArrayLen(3)
	_ = e.EncodeFloat64(float64(time.Now().UnixNano()) / 1e9)
	_ = e.EncodeArrayLen(len(pass.Events))
	for i := range pass.Events {
		ev := &pass.Events[i]
		switch ev.Kind {
		case kv.Stored:
			_ = e.EncodeArrayLen(8)
			_ = e.EncodeString("BlockStored")
			_ = e.EncodeArrayLen(len(ev.Blocks))
			for _, b := range ev.Blocks {
				_ = e.EncodeUint(uint64(b.Hash))
			}
			switch n := len(ev.Blocks) * p.blockSize; {
			case ev.Medium != kv.MediumGPU:
				// A lower tier's blocks have no parent and carry no
				// tokens in the pass.
				_ = e.EncodeNil()
				_ = e.EncodeArrayLen(0)
			case n <= len(toks):
				encodeParent(e, ev)
				_ = e.EncodeArrayLen(n)
				// The encoder writes straight to encBuf (a
				// bytes.Buffer is a ByteWriter), so the ids go there
				// as it would write them, without its per-call cost.
				appendMsgpackUints(&p.encBuf, toks[:n])
				toks = toks[n:]
			default:
				encodeParent(e, ev)
				_ = e.EncodeArrayLen(0)
				toks = nil
			}
			_ = e.EncodeInt(int64(p.blockSize))
			_ = e.EncodeNil()
			_ = e.EncodeString(ev.Medium.String())
			_ = e.EncodeNil()
		case kv.Removed:
			_ = e.EncodeArrayLen(3)
			_ = e.EncodeString("BlockRemoved")
			_ = e.EncodeArrayLen(len(ev.RemovedHashes))
			for _, h := range ev.RemovedHashes {
				_ = e.EncodeUint(uint64(h))
			}
			_ = e.EncodeString(ev.Medium.String())
		default: // kv.Cleared
			_ = e.EncodeArrayLen(1)
			_ = e.EncodeString("AllBlocksCleared")
		}
	}
	_ = e.EncodeInt(int64(pass.DPRank))
	return bytes.Clone(p.encBuf.Bytes())
}

// encodeParent writes a Stored event's parent_block_hash: its parent's
// sequence hash, or nil for a sequence's first block.
func encodeParent(e *msgpack.Encoder, ev *kv.Event) {
	if ev.HasParent {
		_ = e.EncodeUint(uint64(ev.Parent))
	} else {
		_ = e.EncodeNil()
	}
}

// appendMsgpackUints writes each of ids as msgpack's shortest unsigned
// integer, as Encoder.EncodeUint does: a positive fixint below 128, then
// uint8, uint16 or uint32 with their type bytes.
func appendMsgpackUints(w *bytes.Buffer, ids []uint32) {
	w.Grow(5 * len(ids))
	b := w.AvailableBuffer()
	for _, t := range ids {
		switch {
		case t < 128:
			b = append(b, byte(t))
		case t < 1<<8:
			b = append(b, 0xcc, byte(t))
		case t < 1<<16:
			b = append(b, 0xcd, byte(t>>8), byte(t))
		default:
			b = append(b, 0xce, byte(t>>24), byte(t>>16), byte(t>>8), byte(t))
		}
	}
	_, _ = w.Write(b)
}

// newKVEncoder is the msgpack encoder of a publisher's batches.
func newKVEncoder(w *bytes.Buffer) *msgpack.Encoder { return msgpack.NewEncoder(w) }

// kvEndSeq is the sequence number that ends a replay: -1 as 8 bytes.
var kvEndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// serveReplay answers replay requests until ctx ends: a request is a
// start sequence number as 8 big-endian bytes, after the client's
// envelope (a DEALER's empty delimiter frame, as vLLM's clients send);
// the answer is every buffered batch from that number on, each as
// [envelope, seq, payload], then [envelope, -1, ""].
func (p *kvPublisher) serveReplay(ctx context.Context) {
	defer close(p.done)
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		f := msg.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			p.log.Debug("kv events replay: malformed request; want [empty delimiter,] 8-byte start sequence", "frames", len(f))
			continue
		}
		env := f[:len(f)-1] // identity, then the delimiter when sent
		start := binary.BigEndian.Uint64(f[len(f)-1])
		for _, b := range p.replayFrom(start) {
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], b.seq)
			if err := p.replay.Send(zmq4.NewMsgFrom(append(env[:len(env):len(env)], seqb[:], b.payload)...)); err != nil {
				break
			}
		}
		_ = p.replay.Send(zmq4.NewMsgFrom(append(env[:len(env):len(env)], kvEndSeq, nil)...))
	}
}

// replayFrom returns the buffered batches numbered start or later, in
// order.
func (p *kvPublisher) replayFrom(start uint64) []kvBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.next - uint64(len(p.buf))
	start = max(start, first)
	out := make([]kvBatch, 0, p.next-min(start, p.next))
	for seq := start; seq < p.next; seq++ {
		out = append(out, kvBatch{seq: seq, payload: p.buf[seq%uint64(p.bufCap)]})
	}
	return out
}

// kvBatch is one buffered batch: its sequence number and payload.
type kvBatch struct {
	seq     uint64
	payload []byte
}

func (p *kvPublisher) close() {
	p.cancel()
	_ = p.replay.Close()
	<-p.done
	p.pub.close()
}
