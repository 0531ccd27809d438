package plane

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/kv"
)

// TestCodec_RoundTrips: a command and a frame with every field set come
// back from the wire equal, the engine's and the KV index's types within
// them included.
func TestCodec_RoundTrips(t *testing.T) {
	t.Parallel()
	next := 12.5
	c := Command{Op: OpSubmit, Session: 1 << 60, Seq: 7, Router: -3, Ack: 9, From: 4, ID: 42, Tokens: []uint32{1, 2, 1 << 31},
		MaxTokens: 128, Priority: -2, Hold: true, Outcome: 3, N: 17, TID: 99, Params: []byte(`{"a":1}`),
		Coupled: true, At: 1.25, Until: 2.5, Turn: 11}
	body, err := EncodeCommand(&c)
	require.NoError(t, err)
	var c2 Command
	require.NoError(t, DecodeCommand(body, &c2))
	assert.Equal(t, c, c2)

	f := Frame{Seq: 5, Head: 6, Turn: 3, Next: &next, Rejected: 2, Leave: "gone",
		Acks:    []SessionAck{{Session: 1, Seq: 2, From: 3}},
		Lost:    &LostFrames{Session: 1, From: 2, Oldest: 3},
		Ended:   &SessionEnded{Session: 4, Reason: "why"},
		Refused: &SessionEnded{Session: 5, Reason: "busy"},
		Items: []Item{
			{Output: &WireOutput{Start: 1, End: 2, Ran: true,
				FirstTokens: []engine.Token{{RequestID: 1, Token: 2, Index: 0, At: 1.5}},
				Completions: []engine.Completion{{RequestID: 1, At: 2, Arrival: 0.5, QueueMs: 0.25, FirstTokenAt: 1.5, PromptTokens: 100, OutputTokens: 2, CachedTokens: 16, Preemptions: 1, Held: true, Truncated: true}},
				Rejections:  []engine.Rejection{{RequestID: 3, At: 1, Code: 1, Reason: "full"}},
				Events:      []engine.Event{{Kind: engine.EventHoldStarted, At: 1, RequestID: 1, Blocks: 4, DurationMs: 2, TransferTokens: 5, DelayMs: 1, MissingTokens: 2}},
				KVEvents: []kv.Event{{ID: 8, DPRank: 1, Kind: kv.Stored, Parent: 77, HasParent: true, Blocks: []kv.Block{{Hash: 1, TokensHash: 2}}},
					{ID: 9, Kind: kv.Removed, RemovedHashes: []kv.SeqHash{5, 6}, Medium: kv.MediumCPU}},
				Metrics: engine.Metrics{TotalBlocks: 100, ActiveBlocks: 3, HeldBlocks: 2, Running: 1, Preemptions: 4}}},
			{Input: &WireInput{At: 1, Cmd: Command{Op: OpReserve, ID: 3}, OK: true, DelayMs: 2, Err: "no"}},
			{Room: &WireRoom{TID: 1, Params: []byte(`{"p":2}`), Err: "e"}},
			{Arrived: &WireArrived{TID: 2, ReqID: 3}},
			{Status: &WireStatus{TID: 4, Status: "abort", Err: "late"}},
		}}
	body, err = EncodeFrame(&f)
	require.NoError(t, err)
	var f2 Frame
	require.NoError(t, DecodeFrame(body, &f2))
	assert.Equal(t, f, f2)

	require.Error(t, DecodeFrame(append(body, 0), &f2), "trailing bytes")
	require.Error(t, DecodeFrame(body[:len(body)/2], &f2), "cut short")
}

// TestCodec_CommandBatches: a message's body is its commands back to
// back; they come back in order, and a body cut inside a command, empty,
// or with bytes after its last command is refused.
func TestCodec_CommandBatches(t *testing.T) {
	t.Parallel()
	cmds := []Command{
		{Op: OpHello, Session: 5, Seq: 1, Router: 8},
		{Op: OpSubmit, Session: 5, Seq: 2, ID: 3, Tokens: []uint32{4, 5, 6}, MaxTokens: 9},
		{Op: OpCancel, Session: 5, Seq: 3, ID: 3, Ack: 2},
	}
	var body []byte
	for i := range cmds {
		var err error
		body, err = AppendCommand(body, &cmds[i])
		require.NoError(t, err)
	}
	got, err := DecodeCommands(body, nil)
	require.NoError(t, err)
	assert.Equal(t, cmds, got)

	one, err := EncodeCommand(&cmds[1])
	require.NoError(t, err)
	got, err = DecodeCommands(one, got[:0])
	require.NoError(t, err)
	assert.Equal(t, cmds[1:2], got, "a message of one command is a batch of one")

	_, err = DecodeCommands(body[:len(body)-2], nil)
	assert.Error(t, err, "cut short")
	_, err = DecodeCommands(nil, nil)
	assert.Error(t, err, "empty")
	_, err = DecodeCommands(append(body[:len(body):len(body)], 0xc1), nil)
	assert.Error(t, err, "a byte that is no command")
	var c Command
	assert.Error(t, DecodeCommand(body, &c), "DecodeCommand takes one command alone")
}

// TestCodec_Tokens: a command's tokens come back as their own slice (the
// message's bytes reused after decoding leave them be), and a tokens
// field cut short, of a length no multiple of 4, or claiming more bytes
// than the message holds is refused.
func TestCodec_Tokens(t *testing.T) {
	t.Parallel()
	tokens := make([]uint32, 1000)
	for i := range tokens {
		tokens[i] = uint32(i)*2654435761 + 1
	}
	c := Command{Op: OpSubmit, ID: 1, Tokens: tokens}
	body, err := EncodeCommand(&c)
	require.NoError(t, err)
	var got Command
	require.NoError(t, DecodeCommand(body, &got))
	want := append([]uint32(nil), tokens...)
	clear(body)
	assert.Equal(t, want, got.Tokens, "the tokens do not alias the message")

	body, err = EncodeCommand(&c)
	require.NoError(t, err)
	// The tokens field: bin16 (0xc5), 2-byte length, then the bytes.
	at := bytes.Index(body, []byte{0xc5, 0x0f, 0xa0})
	require.Positive(t, at, "the tokens field's header")
	assert.Error(t, DecodeCommand(body[:at+3+400], &got), "cut inside the tokens")
	huge := append([]byte(nil), body...)
	copy(huge[at+1:], []byte{0xff, 0xfc})
	assert.ErrorContains(t, DecodeCommand(huge, &got), "left", "a length past the message's end")
	odd := append([]byte(nil), body[:at]...)
	odd = append(odd, 0xc4, 3, 1, 2, 3)
	odd = append(odd, body[at+3+4000:]...)
	assert.ErrorContains(t, DecodeCommand(odd, &got), "multiple of 4")

	c.Tokens = nil
	body, err = EncodeCommand(&c)
	require.NoError(t, err)
	require.NoError(t, DecodeCommand(body, &got))
	assert.Nil(t, got.Tokens, "no tokens stay nil")
}

// TestCommandOf_RefusesAPromptWithTokensLeftOut: a request that leaves
// covered tokens out (engine.Request.Skip) would reach a remote worker
// short of its prompt, so turning it into a command panics, naming it; a
// whole prompt crosses unchanged.
func TestCommandOf_RefusesAPromptWithTokensLeftOut(t *testing.T) {
	t.Parallel()
	whole := engine.Request{ID: 7, Tokens: []uint32{1, 2, 3}, MaxTokens: 2}
	c := CommandOf(&engine.Submit{Request: whole})
	assert.Equal(t, whole.Tokens, c.Tokens)
	skipped := engine.Request{ID: 8, Tokens: []uint32{3}, MaxTokens: 2, Skip: 16}
	assert.PanicsWithValue(t, "plane: request 8 leaves out 16 prompt tokens (Request.Skip); a remote worker needs them all",
		func() { CommandOf(&engine.Submit{Request: skipped}) })
	assert.Panics(t, func() { CommandOf(&engine.Reserve{Request: skipped}) })
}
