package kv_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/kv"
)

func TestEventJSON_RoundTripAndWireShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ev   kv.WorkerEvent
		wire string
	}{
		{
			name: "stored without parent",
			ev: kv.WorkerEvent{WorkerID: 3, Event: kv.Event{ID: 7, Kind: kv.Stored,
				Blocks: []kv.Block{{Hash: 11, TokensHash: 12}}}},
			wire: `{"worker_id":3,"event":{"event_id":7,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":12}]}}}}`,
		},
		{
			name: "stored with parent",
			ev: kv.WorkerEvent{WorkerID: 1, Event: kv.Event{ID: 8, Kind: kv.Stored, HasParent: true, Parent: 5,
				Blocks: []kv.Block{{Hash: 13, TokensHash: 14}, {Hash: 15, TokensHash: 16}}}},
			wire: `{"worker_id":1,"event":{"event_id":8,"dp_rank":0,"data":{"stored":{"parent_hash":5,"blocks":[{"block_hash":13,"tokens_hash":14},{"block_hash":15,"tokens_hash":16}]}}}}`,
		},
		{
			name: "removed",
			ev:   kv.WorkerEvent{WorkerID: 2, Event: kv.Event{ID: 9, DPRank: 1, Kind: kv.Removed, RemovedHashes: []kv.SeqHash{13, 15}}},
			wire: `{"worker_id":2,"event":{"event_id":9,"dp_rank":1,"data":{"removed":{"block_hashes":[13,15]}}}}`,
		},
		{
			name: "stored on the host tier",
			ev: kv.WorkerEvent{WorkerID: 4, Event: kv.Event{ID: 2, Kind: kv.Stored, Medium: kv.MediumCPU,
				Blocks: []kv.Block{{Hash: 13}}}},
			wire: `{"worker_id":4,"event":{"event_id":2,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":13,"tokens_hash":0}]}},"medium":"CPU"}}`,
		},
		{
			name: "removed from the host tier",
			ev:   kv.WorkerEvent{WorkerID: 4, Event: kv.Event{ID: 3, Kind: kv.Removed, Medium: kv.MediumCPU, RemovedHashes: []kv.SeqHash{13}}},
			wire: `{"worker_id":4,"event":{"event_id":3,"dp_rank":0,"data":{"removed":{"block_hashes":[13]}},"medium":"CPU"}}`,
		},
		{
			name: "removed from the disk tier",
			ev:   kv.WorkerEvent{WorkerID: 4, Event: kv.Event{ID: 5, Kind: kv.Removed, Medium: kv.MediumDisk, RemovedHashes: []kv.SeqHash{13}}},
			wire: `{"worker_id":4,"event":{"event_id":5,"dp_rank":0,"data":{"removed":{"block_hashes":[13]}},"medium":"DISK"}}`,
		},
		{
			name: "stored in object storage",
			ev: kv.WorkerEvent{WorkerID: 4, Event: kv.Event{ID: 0, Kind: kv.Stored, Medium: kv.MediumExternal,
				Blocks: []kv.Block{{Hash: 13}}}},
			wire: `{"worker_id":4,"event":{"event_id":0,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":13,"tokens_hash":0}]}},"medium":"EXTERNAL"}}`,
		},
		{
			name: "cleared",
			ev:   kv.WorkerEvent{WorkerID: 2, Event: kv.Event{ID: 10, Kind: kv.Cleared}},
			wire: `{"worker_id":2,"event":{"event_id":10,"dp_rank":0,"data":"cleared"}}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tc.ev)
			require.NoError(t, err)
			assert.JSONEq(t, tc.wire, string(b))
			var back kv.WorkerEvent
			require.NoError(t, json.Unmarshal([]byte(tc.wire), &back))
			assert.Equal(t, tc.ev, back)
		})
	}
}

func TestEventJSON_RejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, wire := range []string{
		`{"event_id":1,"data":"wiped"}`,
		`{"event_id":1,"data":{}}`,
		`{"event_id":1,"data":{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}}`,
		`{"event_id":"x"}`,
		`{"event_id":1,"data":"cleared","medium":"TAPE"}`,
	} {
		var ev kv.Event
		assert.Error(t, json.Unmarshal([]byte(wire), &ev), wire)
	}
	_, err := json.Marshal(kv.Event{ID: 1})
	assert.Error(t, err, "an event without a kind cannot be written")
	_, err = json.Marshal(kv.Event{ID: 1, Kind: kv.Cleared, Medium: 9})
	assert.Error(t, err, "an event of an unknown medium cannot be written")
}
