// Package transfer is one handoff's KV transfer over the bootstrap
// protocol, the same for both transports: the prefill side opens a room
// on its bootstrap.Server, hands out the handoff params in its engine's
// shape and closes the room with the hold's outcome; the decode side
// reads the params as a decode of that engine does and awaits the room's
// answer. The in-process cluster (cluster's TCP link) and a distributed
// worker (distributed/worker) both call it, so a handoff speaks one
// protocol whichever process its two sides live in.
package transfer

import (
	"context"
	"errors"

	"github.com/kvstrand/mocker/bootstrap"
	"github.com/kvstrand/mocker/engine"
	"github.com/kvstrand/mocker/handoff"
)

// Params is what the prefill hands its decode for room tid of request
// reqID on s: vLLM's {transfer_id, prefill_host, prefill_port} or, for
// engine "sglang", SGLang's {bootstrap_host, bootstrap_port,
// bootstrap_room}, each with the room's token.
func Params(s *bootstrap.Server, engineName string, tid, reqID uint64) any {
	if engineName == string(engine.EngineSGLang) {
		return s.SGLangParams(tid, reqID)
	}
	return s.VLLMParams(tid, reqID)
}

// Open opens room tid on s and returns its params (Params).
func Open(s *bootstrap.Server, engineName string, tid, reqID uint64) (any, error) {
	if err := s.Open(tid); err != nil {
		return nil, err
	}
	return Params(s, engineName, tid, reqID), nil
}

// Close tells s how the hold behind room tid ended: transferred (the
// decode gets ACK) or not (ABORT). A closed server is no error: its rooms
// went with it.
func Close(s *bootstrap.Server, tid uint64, transferred bool) error {
	var err error
	if transferred {
		err = s.Complete(tid)
	} else {
		err = s.Abort(tid)
	}
	if errors.Is(err, bootstrap.ErrClosed) {
		return nil
	}
	return err
}

// Target is where a decode connects: the source's transfer server, the
// room and its token.
type Target struct {
	Addr  string
	Room  uint64
	Token bootstrap.Token
}

// TargetOf reads handoff params as a decode of engine engineName does
// (raw as bootstrap.ParseVLLMParams takes it: JSON, decoded JSON or the
// params themselves). Params present but malformed are an error naming
// the field.
func TargetOf(engineName string, raw any) (Target, error) {
	if engineName == string(engine.EngineSGLang) {
		p, _, err := bootstrap.ParseSGLangParams(raw)
		return Target{Addr: p.Addr(), Room: p.BootstrapRoom, Token: p.BootstrapToken}, err
	}
	p, _, err := bootstrap.ParseVLLMParams(raw)
	return Target{Addr: p.Addr(), Room: p.TransferID, Token: p.TransferToken}, err
}

// Await connects to t's room for request reqID through c and waits for
// its answer, as the handoff machine takes it: ACK, Abort (the source
// aborted the hold) or Error (anything else, with the reason).
func Await(ctx context.Context, c *bootstrap.Client, t Target, reqID uint64) handoff.TransferStatus {
	st, err := c.Await(ctx, t.Addr, t.Room, reqID, t.Token)
	switch {
	case st == bootstrap.StatusACK:
		return handoff.TransferStatus{Status: handoff.ACK}
	case errors.Is(err, bootstrap.ErrAborted):
		return handoff.TransferStatus{Status: handoff.Abort, Err: err.Error()}
	case err != nil:
		return handoff.TransferStatus{Status: handoff.Error, Err: err.Error()}
	}
	return handoff.TransferStatus{Status: handoff.Error}
}
