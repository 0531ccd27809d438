package serve

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/kvstrand/mocker/cluster"
	"github.com/kvstrand/mocker/kv"
)

// BenchmarkServeKVEvents measures CPU per request through HTTP and the
// cluster (128 prompt tokens, 16 output tokens, non-streamed; each request
// stores 8 blocks and, once the pools fill, evicts as many) with KV events
// published to a zmq4 SUB reading every batch, beside the same server
// without them and a bare net/http handler, in the same run.
func BenchmarkServeKVEvents(b *testing.B) {
	cfg := cluster.Config{Workers: 2, Args: map[string]any{"speedup_ratio": cluster.MaxSpeedupRatio, "max_num_seqs": 256, "num_gpu_blocks": 4096}}
	b.Run("bare-net-http", func(b *testing.B) {
		ts := httptest.NewServer(bareHandler(16, 0))
		defer ts.Close()
		hammer(b, ts.URL+"/v1/completions", 16, false)
	})
	b.Run("serve", func(b *testing.B) {
		_, ts := startServer(b, cfg, Options{})
		hammer(b, ts.URL+"/v1/completions", 16, false)
	})
	b.Run("serve-kv-events", func(b *testing.B) {
		s, ts := startServer(b, cfg, Options{KVEvents: KVEventsOptions{Endpoint: "tcp://127.0.0.1:0"}})
		for _, p := range s.KVEventPublishers() {
			subscribe(b, p.Endpoint)
		}
		hammer(b, ts.URL+"/v1/completions", 16, false)
		var batches uint64
		for _, p := range s.KVEventPublishers() {
			batches += p.Published
		}
		b.ReportMetric(float64(batches)/float64(b.N), "batches/req")
	})
}

// BenchmarkKVEventsEncode measures encoding one pass's events (a request's
// 8 stored blocks of 16 tokens and 8 evicted ones) as vLLM's msgpack
// batch, with the blocks' 128 token ids and without them, beside the same
// events as Dynamo's JSON (kv.Event's MarshalJSON), the encoding the
// distributed transport's consumers read.
func BenchmarkKVEventsEncode(b *testing.B) {
	blocks := make([]kv.Block, 8)
	removed := make([]kv.SeqHash, 8)
	for i := range blocks {
		blocks[i] = kv.Block{Hash: kv.SeqHash(0x9e3779b97f4a7c15 * uint64(i+1)), TokensHash: kv.LocalHash(i)}
		removed[i] = kv.SeqHash(0x51afd7ed558ccd * uint64(i+1))
	}
	events := []kv.Event{
		{ID: 1, Kind: kv.Removed, RemovedHashes: removed},
		{ID: 2, Kind: kv.Stored, Parent: 42, HasParent: true, Blocks: blocks},
	}
	toks := make([]uint32, 8*16)
	for i := range toks {
		toks[i] = uint32(1 + i*211%30000)
	}
	b.Run("vllm-msgpack", func(b *testing.B) {
		p := &kvPublisher{blockSize: 16}
		p.enc = newKVEncoder(&p.encBuf)
		b.ReportAllocs()
		for b.Loop() {
			_ = p.encode(cluster.KVPass{Events: events})
		}
	})
	b.Run("vllm-msgpack-token-ids", func(b *testing.B) {
		p := &kvPublisher{blockSize: 16}
		p.enc = newKVEncoder(&p.encBuf)
		b.ReportAllocs()
		for b.Loop() {
			_ = p.encode(cluster.KVPass{Events: events, Tokens: toks})
		}
	})
	b.Run("dynamo-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, ev := range events {
				_, _ = json.Marshal(ev)
			}
		}
	})
}
