package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/kv"
)

// The structures below mirror vLLM's (vllm/distributed/kv_events.py:
// KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared), msgspec
// structs encoded as arrays in their declared field order, each event
// led by its class name as tag. They are declared here from vLLM's field
// order, not from the server's encoder, and a message decodes into one
// only when its array has exactly the struct's fields, in order (the
// msgpack library's generic array-to-struct decoding).
type vllmKVEventBatch struct {
	TS               float64
	Events           []msgpack.RawMessage
	DataParallelRank *int
}

type vllmBlockStored struct {
	Tag             string
	BlockHashes     []uint64
	ParentBlockHash *uint64
	TokenIDs        []int
	BlockSize       int
	LoraID          *int
	Medium          *string
	LoraName        *string
}

type vllmBlockRemoved struct {
	Tag         string
	BlockHashes []uint64
	Medium      *string
}

// vllmBlockSet rebuilds one publisher's cached blocks from its batches, as
// a consumer of vLLM's events does: stored hashes join, removed ones
// leave, AllBlocksCleared empties it.
//
// It also rebuilds them as a consumer that keys blocks by its own hash of
// their token ids does (llm-d's KV-cache indexer): a stored block's key
// is FNV-1a over its parent's key and its token_ids, the parent's key
// found from the parent's block hash; a removed block's key is found
// from its hash. keys is that set.
//
// cpu is the set of blocks on the host tier (medium "CPU"), rebuilt apart:
// they are not GPU blocks, and a consumer of GPU blocks keeps them out.
type vllmBlockSet struct {
	blocks  map[uint64]bool
	stored  int
	removed int
	seqs    []uint64

	cpu       map[uint64]bool
	offloaded int // blocks stored on CPU
	dropped   int // blocks removed from CPU

	keys     map[uint64]bool
	keyOf    map[uint64]uint64 // block hash → token key, of every block ever stored
	tokensOf map[uint64][]int  // block hash → its token_ids when first stored
	restored int               // stores of a hash stored before
}

func newVLLMBlockSet() *vllmBlockSet {
	return &vllmBlockSet{blocks: map[uint64]bool{}, cpu: map[uint64]bool{}, keys: map[uint64]bool{}, keyOf: map[uint64]uint64{}, tokensOf: map[uint64][]int{}}
}

// tokenKey is a consumer's own key of a block: FNV-1a over its parent's
// key and its token ids, nothing of mocker's hashes.
func tokenKey(parent uint64, toks []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	_, _ = h.Write(b[:])
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		_, _ = h.Write(b[:4])
	}
	return h.Sum64()
}

// storeTokens checks one BlockStored's token_ids and adds its blocks to
// the token-keyed set: block_size ids per block hash, whose chained
// XXH3-64 (mocker's block hash) is the hash sent with them.
func (b *vllmBlockSet) storeTokens(t *testing.T, seq uint64, ev *vllmBlockStored, blockSize int) {
	t.Helper()
	require.Len(t, ev.TokenIDs, len(ev.BlockHashes)*blockSize, "batch %d: block_size token ids per block", seq)
	var parentKey uint64
	var parentHash kv.SeqHash
	if ev.ParentBlockHash != nil {
		k, ok := b.keyOf[*ev.ParentBlockHash]
		require.True(t, ok, "batch %d: parent %x was never stored", seq, *ev.ParentBlockHash)
		parentKey, parentHash = k, kv.SeqHash(*ev.ParentBlockHash)
	}
	for i, h := range ev.BlockHashes {
		toks := ev.TokenIDs[i*blockSize : (i+1)*blockSize]
		ids := make([]uint32, len(toks))
		for k, x := range toks {
			ids[k] = uint32(x)
		}
		local := kv.HashTokens(ids)
		want := kv.SeqHash(local)
		if i > 0 || ev.ParentBlockHash != nil {
			want = kv.ChainHash(parentHash, local)
		}
		assert.Equal(t, uint64(want), h, "batch %d block %d: the token ids hash to the block hash", seq, i)
		key := tokenKey(parentKey, toks)
		if prev, ok := b.tokensOf[h]; ok {
			b.restored++
			assert.Equal(t, prev, toks, "batch %d: block %x stored again with other token ids", seq, h)
			assert.Equal(t, b.keyOf[h], key)
		} else {
			b.tokensOf[h] = slices.Clone(toks)
			b.keyOf[h] = key
		}
		b.keys[key] = true
		parentKey, parentHash = key, kv.SeqHash(h)
	}
}

func (b *vllmBlockSet) apply(t *testing.T, seq uint64, payload []byte, wantRank int, blockSize int) {
	t.Helper()
	var batch vllmKVEventBatch
	require.NoError(t, msgpack.Unmarshal(payload, &batch), "batch %d", seq)
	require.NotNil(t, batch.DataParallelRank, "batch %d names its data-parallel rank", seq)
	assert.Equal(t, wantRank, *batch.DataParallelRank, "batch %d", seq)
	assert.InDelta(t, float64(time.Now().Unix()), batch.TS, 600, "batch %d: ts is wall-clock Unix seconds", seq)
	assert.NotEmpty(t, batch.Events, "batch %d: a batch is published only for a pass with events", seq)
	b.seqs = append(b.seqs, seq)
	for i, raw := range batch.Events {
		var head []msgpack.RawMessage
		require.NoError(t, msgpack.Unmarshal(raw, &head), "batch %d event %d is an array", seq, i)
		require.NotEmpty(t, head)
		var tag string
		require.NoError(t, msgpack.Unmarshal(head[0], &tag))
		switch tag {
		case "BlockStored":
			var ev vllmBlockStored
			require.NoError(t, msgpack.Unmarshal(raw, &ev))
			assert.Equal(t, blockSize, ev.BlockSize)
			require.NotNil(t, ev.Medium)
			assert.Nil(t, ev.LoraID)
			if *ev.Medium == "CPU" {
				// Offloaded to the host tier: no parent, no token ids,
				// and off the GPU already (its BlockRemoved came first).
				assert.Nil(t, ev.ParentBlockHash, "batch %d: a CPU BlockStored names no parent", seq)
				assert.Empty(t, ev.TokenIDs, "batch %d: a CPU BlockStored carries no token ids", seq)
				for _, h := range ev.BlockHashes {
					assert.False(t, b.cpu[h], "batch %d stores block %x on CPU twice", seq, h)
					assert.False(t, b.blocks[h], "batch %d offloads block %x still on the GPU", seq, h)
					b.cpu[h] = true
				}
				b.offloaded += len(ev.BlockHashes)
				continue
			}
			assert.Equal(t, "GPU", *ev.Medium)
			assert.NotEmpty(t, ev.BlockHashes)
			if ev.ParentBlockHash != nil {
				// vLLM's pool may store a block whose parent it has
				// evicted; the parent is named all the same.
				assert.NotZero(t, *ev.ParentBlockHash)
			}
			for _, h := range ev.BlockHashes {
				b.blocks[h] = true
			}
			b.stored += len(ev.BlockHashes)
			b.storeTokens(t, seq, &ev, blockSize)
		case "BlockRemoved":
			var ev vllmBlockRemoved
			require.NoError(t, msgpack.Unmarshal(raw, &ev))
			require.NotNil(t, ev.Medium)
			if *ev.Medium == "CPU" {
				for _, h := range ev.BlockHashes {
					assert.True(t, b.cpu[h], "batch %d removes block %x from CPU, which does not hold it", seq, h)
					delete(b.cpu, h)
				}
				b.dropped += len(ev.BlockHashes)
				continue
			}
			assert.Equal(t, "GPU", *ev.Medium)
			for _, h := range ev.BlockHashes {
				assert.True(t, b.blocks[h], "batch %d removes block %x it never stored (or stored and removed already)", seq, h)
				delete(b.blocks, h)
				key, ok := b.keyOf[h]
				assert.True(t, ok && b.keys[key], "batch %d removes block %x, unknown by its token key", seq, h)
				delete(b.keys, key)
			}
			b.removed += len(ev.BlockHashes)
		case "AllBlocksCleared":
			clear(b.blocks)
			clear(b.keys)
		default:
			t.Fatalf("batch %d event %d: unknown tag %q", seq, i, tag)
		}
	}
}

// tokenKeys is the token keys of the blocks in hashes, as b knows them.
func (b *vllmBlockSet) tokenKeys(hashes map[uint64]bool) map[uint64]bool {
	out := map[uint64]bool{}
	for h := range hashes {
		if k, ok := b.keyOf[h]; ok {
			out[k] = true
		}
	}
	return out
}

// kvEventsConfig is a cluster that reuses prefixes and evicts: two
// aggregated workers of two data-parallel ranks each (four publishers),
// a kv router, and pools of 48 blocks of 16 tokens that the prompts below
// overflow many times.
func kvEventsConfig() cluster.Config {
	return cluster.Config{
		Workers: 2,
		Router:  "kv",
		Args:    map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 48, "block_size": 16, "dp_size": 2},
	}
}

// kvEventsLoad sends n completions whose prompts share one of 6 prefixes
// of 128 tokens, then a tail of 40 to 200 tokens of their own, 6 at a
// time, and returns the summed cached tokens of the answers.
func kvEventsLoad(t *testing.T, url string, hc *http.Client, n int, seed uint64) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	prefixes := make([][]int, 6)
	for i := range prefixes {
		for range 128 {
			prefixes[i] = append(prefixes[i], 1+rng.IntN(30000))
		}
	}
	prompts := make([][]int, n)
	for i := range prompts {
		p := slices.Clone(prefixes[rng.IntN(len(prefixes))])
		for range 40 + rng.IntN(160) {
			p = append(p, 1+rng.IntN(30000))
		}
		prompts[i] = p
	}
	var mu sync.Mutex
	cached := 0
	work := make(chan []int)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for p := range work {
				body, _ := json.Marshal(map[string]any{"model": "mocker", "prompt": p, "max_tokens": 20})
				resp, err := hc.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
				if !assert.NoError(t, err) {
					continue
				}
				var out struct {
					Usage struct {
						Details struct {
							Cached int `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
				_ = resp.Body.Close()
				mu.Lock()
				cached += out.Usage.Details.Cached
				mu.Unlock()
			}
		})
	}
	for _, p := range prompts {
		work <- p
	}
	close(work)
	wg.Wait()
	return cached
}

// subscribe connects a zmq4 SUB socket to endpoint, subscribed to every
// topic, and collects its messages until the test ends.
type kvSubscriber struct {
	sock zmq4.Socket
	mu   sync.Mutex
	msgs [][][]byte
	done chan struct{}
}

func subscribe(t testing.TB, endpoint string) *kvSubscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sock := zmq4.NewSub(ctx)
	require.NoError(t, sock.SetOption(zmq4.OptionSubscribe, ""))
	require.NoError(t, sock.Dial(endpoint))
	s := &kvSubscriber{sock: sock, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			msg, err := sock.Recv()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, msg.Frames)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = sock.Close()
		<-s.done
	})
	return s
}

func (s *kvSubscriber) received() [][][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// waitFor polls cond every 10 ms for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKVEvents_SubscriberRebuildsEachWorkersBlocks: a zmq4 SUB per
// publisher decodes every batch into vLLM's structures and rebuilds the
// worker rank's cached blocks; after a run with prefix reuse and
// evictions, each rebuilt set equals the blocks the rank's cache holds,
// and the sequence numbers run from 0 without a gap.
func TestKVEvents_SubscriberRebuildsEachWorkersBlocks(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"vllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			cfg := kvEventsConfig()
			cfg.Engine = engine
			off, drop := testKVEventsRebuild(t, cfg)
			assert.Zero(t, off+drop, "without a host tier no event names the CPU medium")
		})
	}
}

// TestKVEvents_SubscriberRebuildsGPUAndHostTiers: with a host tier, the
// same subscribers rebuild each rank's GPU blocks and its host tier's
// blocks apart, from the medium of each event, and each set equals what
// the rank holds on that tier.
func TestKVEvents_SubscriberRebuildsGPUAndHostTiers(t *testing.T) {
	t.Parallel()
	cfg := kvEventsConfig()
	cfg.Args["num_g2_blocks"] = 64
	off, drop := testKVEventsRebuild(t, cfg)
	assert.Positive(t, off, "blocks were offloaded to the host tier")
	assert.Positive(t, drop, "the host tier dropped blocks")
}

// testKVEventsRebuild runs kvEventsLoad on a server of cfg with a
// subscriber per publisher, checks each rebuilt GPU and CPU set against
// the rank's cache and host tier, and returns the blocks the events
// stored on and removed from the CPU medium.
func testKVEventsRebuild(t *testing.T, cfg cluster.Config) (offloaded, dropped int) {
	s, ts := startServer(t, cfg, Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0", Topic: "kv@mocker"}})
	pubs := s.KVEventPublishers()
	require.Len(t, pubs, 4, "one publisher per worker rank")
	subs := make([]*kvSubscriber, len(pubs))
	for i, p := range pubs {
		subs[i] = subscribe(t, p.Endpoint)
	}
	waitFor(t, "every SUB's subscription to reach its publisher", func() bool {
		for _, p := range s.KVEventPublishers() {
			if p.Subscribers != 1 {
				return false
			}
		}
		return true
	})

	cached := kvEventsLoad(t, ts.URL, client(ts), 240, 1)
	assert.Positive(t, cached, "prompts that share prefixes hit the cache")

	blockSize := s.Cluster().BlockSize()
	var stored, removed, restored, shared int
	tokensOf := map[uint64][]int{} // over every publisher
	for i, p := range s.KVEventPublishers() {
		waitFor(t, fmt.Sprintf("publisher %d's %d batches", i, p.Published), func() bool {
			return len(subs[i].received()) == int(p.Published)
		})
		set := newVLLMBlockSet()
		for k, frames := range subs[i].received() {
			require.Len(t, frames, 3, "[topic, seq, payload]")
			assert.Equal(t, "kv@mocker", string(frames[0]))
			require.Len(t, frames[1], 8, "an 8-byte sequence number")
			seq := binary.BigEndian.Uint64(frames[1])
			require.Equal(t, uint64(k), seq, "publisher %d: sequence numbers run from 0 without a gap", i)
			set.apply(t, seq, frames[2], p.DPRank, blockSize)
		}
		hs, err := s.Cluster().CachedBlocks(i)
		require.NoError(t, err)
		want := map[uint64]bool{}
		for _, h := range hs {
			want[uint64(h)] = true
		}
		assert.Equal(t, want, set.blocks, "publisher %d (%s rank %d): the rebuilt set is the cache's", i, p.Worker, p.DPRank)
		host, err := s.Cluster().HostBlocks(i)
		require.NoError(t, err)
		wantHost := map[uint64]bool{}
		for _, h := range host {
			wantHost[uint64(h)] = true
		}
		assert.Equal(t, wantHost, set.cpu, "publisher %d: the rebuilt CPU set is the host tier's", i)
		offloaded += set.offloaded
		dropped += set.dropped
		// The set keyed by token ids alone has the same shape: one key
		// per cached block, none other.
		assert.Len(t, set.keys, len(want), "publisher %d: one token key per cached block", i)
		assert.Equal(t, set.tokenKeys(want), set.keys, "publisher %d: the token-keyed set is the cache's", i)
		assert.Positive(t, p.Published, "publisher %d published", i)
		assert.Zero(t, p.Dropped)
		stored += set.stored
		removed += set.removed
		restored += set.restored
		for h, toks := range set.tokensOf {
			if prev, ok := tokensOf[h]; ok {
				shared++
				assert.Equal(t, prev, toks, "block %x has other token ids on publisher %d", h, i)
			}
			tokensOf[h] = toks
		}
	}
	assert.Positive(t, removed, "the run evicted blocks (%d stored)", stored)
	assert.Positive(t, restored, "blocks of shared prefixes were stored again after their eviction")
	assert.Positive(t, shared, "blocks of shared prefixes were stored by more than one worker rank")
	return offloaded, dropped
}

// replay asks a publisher's replay socket, through a zmq4 DEALER, for the
// batches from start on, as vLLM's clients do ([empty delimiter, start as
// 8 big-endian bytes]), and returns them as [seq, payload] pairs up to the
// end marker (sequence -1, empty payload).
func replay(t *testing.T, endpoint string, start uint64) [][2][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	require.NoError(t, d.Dial(endpoint))
	var startb [8]byte
	binary.BigEndian.PutUint64(startb[:], start)
	require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte{}, startb[:])))
	var out [][2][]byte
	for {
		msg, err := d.Recv()
		require.NoError(t, err, "replay from %d", start)
		require.Len(t, msg.Frames, 3, "[empty delimiter, seq, payload]")
		assert.Empty(t, msg.Frames[0])
		if int64(binary.BigEndian.Uint64(msg.Frames[1])) == -1 {
			assert.Empty(t, msg.Frames[2], "the end marker's payload")
			return out
		}
		out = append(out, [2][]byte{msg.Frames[1], msg.Frames[2]})
	}
}

// cachedSet is the publisher i's worker rank's cached blocks now.
func cachedSet(t *testing.T, s *Server, i int) map[uint64]bool {
	t.Helper()
	hs, err := s.Cluster().CachedBlocks(i)
	require.NoError(t, err)
	want := map[uint64]bool{}
	for _, h := range hs {
		want[uint64(h)] = true
	}
	return want
}

// TestKVEvents_LateSubscriberCatchesUpThroughReplay: a subscriber that
// arrives after a run subscribes, asks the replay socket for everything
// from sequence 0, and then follows the live stream from where the replay
// ended: the two together rebuild each worker rank's blocks exactly.
func TestKVEvents_LateSubscriberCatchesUpThroughReplay(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, kvEventsConfig(), Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0"}})
	kvEventsLoad(t, ts.URL, client(ts), 80, 2)

	pubs := s.KVEventPublishers()
	subs := make([]*kvSubscriber, len(pubs))
	for i, p := range pubs {
		subs[i] = subscribe(t, p.Endpoint)
	}
	waitFor(t, "the late subscriptions", func() bool {
		for _, p := range s.KVEventPublishers() {
			if p.Subscribers != 1 {
				return false
			}
		}
		return true
	})
	sets := make([]*vllmBlockSet, len(pubs))
	caughtUp := make([]uint64, len(pubs))
	for i, p := range pubs {
		require.Positive(t, p.Published)
		sets[i] = newVLLMBlockSet()
		got := replay(t, p.ReplayEndpoint, 0)
		require.Len(t, got, int(p.Published), "publisher %d: the whole run is still buffered", i)
		for k, b := range got {
			seq := binary.BigEndian.Uint64(b[0])
			require.Equal(t, uint64(k), seq)
			sets[i].apply(t, seq, b[1], p.DPRank, s.Cluster().BlockSize())
		}
		caughtUp[i] = uint64(len(got))
		assert.Equal(t, cachedSet(t, s, i), sets[i].blocks, "publisher %d: replay alone rebuilds the cache", i)
	}

	kvEventsLoad(t, ts.URL, client(ts), 80, 3)
	for i, p := range s.KVEventPublishers() {
		waitFor(t, "the live batches", func() bool { return len(subs[i].received()) == int(p.Published-caughtUp[i]) })
		for k, frames := range subs[i].received() {
			seq := binary.BigEndian.Uint64(frames[1])
			require.Equal(t, caughtUp[i]+uint64(k), seq, "publisher %d: the live stream goes on where the replay ended", i)
			sets[i].apply(t, seq, frames[2], p.DPRank, s.Cluster().BlockSize())
		}
		assert.Equal(t, cachedSet(t, s, i), sets[i].blocks, "publisher %d: replay then live rebuilds the cache", i)
	}
}

// TestKVEvents_ReplayBufferIsBounded: a publisher keeps only its last
// Buffer batches; a replay from before them starts at the oldest kept, and
// one from the middle gets the rest.
func TestKVEvents_ReplayBufferIsBounded(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, cluster.Config{Workers: 1, Args: fast}, Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0", Buffer: 5}})
	kvEventsLoad(t, ts.URL, client(ts), 30, 4)
	p := s.KVEventPublishers()[0]
	require.Greater(t, p.Published, uint64(7))
	seqs := func(got [][2][]byte) []uint64 {
		var out []uint64
		for _, b := range got {
			out = append(out, binary.BigEndian.Uint64(b[0]))
		}
		return out
	}
	n := p.Published
	assert.Equal(t, []uint64{n - 5, n - 4, n - 3, n - 2, n - 1}, seqs(replay(t, p.ReplayEndpoint, 0)))
	assert.Equal(t, []uint64{n - 2, n - 1}, seqs(replay(t, p.ReplayEndpoint, n-2)))
	assert.Empty(t, replay(t, p.ReplayEndpoint, n+10), "nothing from past the last batch: only the end marker")
}

// stalledSubscriber greets a publisher as a ZMQ SUB, subscribes to
// everything and never reads again, through a receive buffer of 4 KB.
func stalledSubscriber(t *testing.T, endpoint string) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	require.NoError(t, err)
	conn, err := zmq4.Open(c, null.Security(), zmq4.Sub, zmq4.SocketIdentity(""), false, nil)
	require.NoError(t, err)
	require.NoError(t, conn.SendMsg(zmq4.NewMsg([]byte{1})))
	t.Cleanup(func() { _ = conn.Close() })
}

// TestKVEvents_StalledSubscriberNeverBlocksTheCluster: a subscriber that
// stops reading costs the cluster nothing: every request completes, and
// the batches it cannot take are dropped for it (its queue holds HWM of
// them), as a ZMQ PUB socket drops at its high-water mark.
func TestKVEvents_StalledSubscriberNeverBlocksTheCluster(t *testing.T) {
	t.Parallel()
	s, ts := startServer(t, kvEventsConfig(), Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0", HWM: 2}})
	pubs := s.KVEventPublishers()
	for _, p := range pubs {
		stalledSubscriber(t, p.Endpoint)
	}
	waitFor(t, "the stalled subscriptions", func() bool {
		for _, p := range s.KVEventPublishers() {
			if p.Subscribers != 1 {
				return false
			}
		}
		return true
	})
	kvEventsLoad(t, ts.URL, client(ts), 240, 5) // asserts every answer is 200
	st := s.Cluster().Stats()
	assert.Equal(t, uint64(240), st.Completed)
	for _, p := range s.KVEventPublishers() {
		assert.Positive(t, p.Published)
	}
}

// TestPubSocket_PublishNeverWaits: publishing 20,000 messages of 4 KB to a
// subscriber that never reads returns, and drops what its queue cannot
// hold.
func TestPubSocket_PublishNeverWaits(t *testing.T) {
	t.Parallel()
	p, err := listenPub("127.0.0.1:0", 8, 4)
	require.NoError(t, err)
	defer p.close()
	stalledSubscriber(t, "tcp://"+p.addr().String())
	waitFor(t, "the subscription", func() bool { subs, _ := p.stats(); return subs == 1 })
	payload := make([]byte, 4096)
	for i := range 20000 {
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], uint64(i))
		p.publish(nil, [][]byte{nil, seq[:], payload})
	}
	_, dropped := p.stats()
	assert.Greater(t, dropped, uint64(19000), "an 8-message queue and a 4 KB window hold little of 80 MB")
}

// TestKVEvents_PortsFollowTheWorkerOrder: publisher i binds the endpoint's
// port + i, and replay socket i the port after the last publisher's + i.
func TestKVEvents_PortsFollowTheWorkerOrder(t *testing.T) {
	t.Parallel()
	// Bases below the usual ephemeral range (32768 on), so that the
	// connections of tests running beside this one do not take them.
	var s *Server
	var base int
	for try := 0; ; try++ {
		base = 20000 + rand.IntN(12000)
		var err error
		s, err = New(kvEventsConfig(), Options{KVEvents: KVEventsOptions{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base)}})
		if err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("no free run of 8 ports: %v", err)
		}
	}
	defer s.Close()
	st := s.Cluster().Stats()
	pubs := s.KVEventPublishers()
	require.Len(t, pubs, len(st.Workers))
	for i, p := range pubs {
		assert.Equal(t, st.Workers[i].Name, p.Worker)
		assert.Equal(t, st.Workers[i].DPRank, p.DPRank)
		assert.Equal(t, fmt.Sprintf("tcp://127.0.0.1:%d", base+i), p.Endpoint)
		assert.Equal(t, fmt.Sprintf("tcp://127.0.0.1:%d", base+len(pubs)+i), p.ReplayEndpoint)
	}
}

// TestKVEvents_BadOptions: each bad setting is refused, naming what to fix.
func TestKVEvents_BadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts KVEventsOptions
		cfg  cluster.Config
		want string
	}{
		{KVEventsOptions{Endpoint: "127.0.0.1:5557"}, cluster.Config{}, "want tcp://HOST:PORT"},
		{KVEventsOptions{Endpoint: "ipc:///tmp/x"}, cluster.Config{}, "want tcp://HOST:PORT"},
		{KVEventsOptions{Endpoint: "tcp://127.0.0.1:99999"}, cluster.Config{}, "port \"99999\""},
		{KVEventsOptions{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://x"}, cluster.Config{}, "replay endpoint"},
		{KVEventsOptions{Endpoint: "tcp://127.0.0.1:0", Buffer: -1}, cluster.Config{}, "buffer -1"},
		{KVEventsOptions{Endpoint: "tcp://127.0.0.1:0"}, cluster.Config{Transport: &cluster.TransportConfig{NATS: "nats://x"}}, "in-process workers only"},
	} {
		_, err := New(tc.cfg, Options{KVEvents: tc.opts})
		if assert.Error(t, err, "%+v", tc.opts) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

// TestKVEvents_TokenIDsAreThePromptsTokens: text prompts that share a long
// opening are answered one after another by one worker; a subscriber reads
// the token ids of every stored block. Each prompt's full blocks are
// stored with the prompt's ids as Tokenize gives them (the opening's once,
// for the first prompt; a later one finds them cached), and the blocks
// past a prompt hold the generated ids, in [1000, 2000), which the block
// hashes chain over.
func TestKVEvents_TokenIDsAreThePromptsTokens(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"vllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			cfg := cluster.Config{Workers: 1, Engine: engine, Args: map[string]any{"speedup_ratio": 1000, "num_gpu_blocks": 1024, "block_size": 16}}
			s, ts := startServer(t, cfg, Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0"}})
			sub := subscribe(t, s.KVEventPublishers()[0].Endpoint)
			waitFor(t, "the subscription", func() bool { return s.KVEventPublishers()[0].Subscribers == 1 })

			rng := rand.New(rand.NewPCG(9, 9))
			word := func() string { return fmt.Sprintf("w%d", rng.IntN(5000)) }
			var opening strings.Builder
			for range 150 {
				opening.WriteString(" " + word())
			}
			var prompts []string
			for range 5 {
				p := opening.String()
				for range 20 + rng.IntN(60) {
					p += " " + word() + ","
				}
				prompts = append(prompts, p)
			}
			for _, p := range prompts {
				body, _ := json.Marshal(map[string]any{"model": "mocker", "prompt": p, "max_tokens": 48})
				resp, err := client(ts).Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
			}

			bs := s.Cluster().BlockSize()
			pub := s.KVEventPublishers()[0]
			waitFor(t, "every batch", func() bool { return len(sub.received()) == int(pub.Published) })
			set := newVLLMBlockSet()
			for _, frames := range sub.received() {
				set.apply(t, binary.BigEndian.Uint64(frames[1]), frames[2], 0, bs)
			}
			promptBlocks := map[uint64]bool{}
			for i, p := range prompts {
				ids := Tokenize(p, nil, nil)
				_, seqs := kv.BlockHashes(ids, bs, nil, nil)
				require.Greater(t, len(seqs), 150/bs, "prompt %d has the opening's blocks and more", i)
				for j, h := range seqs {
					promptBlocks[uint64(h)] = true
					got, ok := set.tokensOf[uint64(h)]
					if !assert.True(t, ok, "prompt %d block %d was stored", i, j) {
						continue
					}
					want := make([]int, bs)
					for k, id := range ids[j*bs : (j+1)*bs] {
						want[k] = int(id)
					}
					assert.Equal(t, want, got, "prompt %d block %d: its token ids are the prompt's", i, j)
				}
			}
			generated := 0
			for h, toks := range set.tokensOf {
				if promptBlocks[h] {
					continue
				}
				generated++
				// A generated block starts with the prompt's last,
				// partial block, then the output tokens.
				last := toks[len(toks)-1]
				assert.True(t, last >= 1000 && last < 2000, "block %x ends with a generated token id, got %d", h, last)
			}
			assert.Positive(t, generated, "blocks of generated tokens were stored too")
			assert.Zero(t, set.restored, "no block is stored twice in a pool that evicts nothing")
		})
	}
}

// TestKVEventsEncode_TokenIDs: each BlockStored carries block_size ids per
// block hash, taken in order from the pass's Tokens across its Stored
// events; a pass without Tokens sends an empty token_ids.
func TestKVEventsEncode_TokenIDs(t *testing.T) {
	t.Parallel()
	events := []kv.Event{
		{ID: 0, Kind: kv.Stored, Blocks: []kv.Block{{Hash: 11}, {Hash: 12}}},
		{ID: 1, Kind: kv.Removed, RemovedHashes: []kv.SeqHash{5}},
		{ID: 2, Kind: kv.Stored, Parent: 12, HasParent: true, Blocks: []kv.Block{{Hash: 13}}},
	}
	decode := func(pass cluster.KVPass) [][]int {
		p := &kvPublisher{blockSize: 2}
		p.enc = newKVEncoder(&p.encBuf)
		var batch vllmKVEventBatch
		require.NoError(t, msgpack.Unmarshal(p.encode(pass), &batch))
		var out [][]int
		for _, raw := range batch.Events {
			var ev vllmBlockStored
			if msgpack.Unmarshal(raw, &ev) == nil {
				out = append(out, ev.TokenIDs)
			}
		}
		return out
	}
	assert.Equal(t, [][]int{{7, 200, 1000, 70000}, {1 << 31, 127}}, decode(cluster.KVPass{Events: events, Tokens: []uint32{7, 200, 1000, 70000, 1 << 31, 127}}))
	// The ids are encoded as the encoder's EncodeUint encodes them.
	for _, id := range []uint32{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1} {
		var got, want bytes.Buffer
		appendMsgpackUints(&got, []uint32{id})
		require.NoError(t, msgpack.NewEncoder(&want).EncodeUint(uint64(id)))
		assert.Equal(t, want.Bytes(), got.Bytes(), "id %d", id)
	}
	assert.Equal(t, [][]int{{}, {}}, decode(cluster.KVPass{Events: events}))
}
