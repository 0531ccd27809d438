package transfer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/handoff"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func server(t *testing.T) *bootstrap.Server {
	t.Helper()
	s, err := bootstrap.Listen(bootstrap.Config{Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestTransfer_RoomOutcomeReachesTheDecode: params handed out by the
// prefill, sent as JSON and read back by the decode, lead to the room's
// outcome, for both engines' shapes.
func TestTransfer_RoomOutcomeReachesTheDecode(t *testing.T) {
	for _, eng := range []string{"vllm", "sglang"} {
		t.Run(eng, func(t *testing.T) {
			s := server(t)
			var c bootstrap.Client
			defer func() { _ = c.Close() }()
			for tid, transferred := range map[uint64]bool{1: true, 2: false} {
				params, err := Open(s, eng, tid, 100+tid)
				require.NoError(t, err)
				raw, err := json.Marshal(params)
				require.NoError(t, err)
				target, err := TargetOf(eng, json.RawMessage(raw))
				require.NoError(t, err)
				assert.Equal(t, s.AdvertisedAddr(), target.Addr)
				assert.Equal(t, tid, target.Room)
				require.NoError(t, Close(s, tid, transferred))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				st := Await(ctx, &c, target, 100+tid)
				cancel()
				if transferred {
					assert.Equal(t, handoff.TransferStatus{Status: handoff.ACK}, st)
				} else {
					assert.Equal(t, handoff.Abort, st.Status)
					assert.Contains(t, st.Err, "abort")
				}
			}
		})
	}
}

// TestTransfer_AWrongRequestOrBadParamsIsAnError: the room's token binds
// its request; malformed params are refused by name before any dial.
func TestTransfer_AWrongRequestOrBadParamsIsAnError(t *testing.T) {
	s := server(t)
	var c bootstrap.Client
	defer func() { _ = c.Close() }()
	params, err := Open(s, "vllm", 7, 70)
	require.NoError(t, err)
	target, err := TargetOf("vllm", params)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := Await(ctx, &c, target, 71)
	assert.Equal(t, handoff.Error, st.Status)
	assert.NotEmpty(t, st.Err)

	_, err = TargetOf("vllm", json.RawMessage(`{"transfer_id": 7, "prefill_host": "", "prefill_port": 1}`))
	assert.ErrorIs(t, err, bootstrap.ErrBadParams)
	_, err = TargetOf("sglang", json.RawMessage(`{"bootstrap_host": "h", "bootstrap_port": -1, "bootstrap_room": 1}`))
	assert.ErrorIs(t, err, bootstrap.ErrBadParams)

	require.NoError(t, s.Close())
	assert.NoError(t, Close(s, 7, true), "a closed server's rooms went with it")
}
