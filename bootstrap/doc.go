// Package bootstrap is the KV-transfer rendezvous between a prefill worker
// that holds a request's KV and the decode worker that takes it over: a TCP
// Server per prefill worker, the decode-side client Await, process-monotonic
// transfer ids (NextTransferID) and the handoff params that travel with the
// request (VLLMParams, SGLangParams).
//
// The server is transport only. It does not decide whether or when a
// transfer completes: the prefill engine does, and tells the server with
// Complete or Abort.
//
// # Wire protocol, version 1
//
// The decode side connects and sends one 24-byte header, all integers
// little-endian:
//
//	offset  size  field
//	0       4     magic "MKVT"
//	4       2     version, u16 = 1
//	6       2     flags, u16 = 0 (reserved; any set bit is refused)
//	8       8     transfer id, u64, non-zero
//	16      8     request id, u64 (the decode's, passed to OnDecodeArrived)
//
// It then sends nothing more and must not half-close: the server reads on
// while it waits, and end-of-stream means the decode gave up. When the
// outcome is known the server writes exactly one status byte and closes:
//
//	0x01 ACK    the transfer is done; the decode activates the request
//	0x02 ABORT  the source aborted; the decode frees its reservation and
//	            fails the request as aborted
//	0x03 ERROR  refused: bad magic, version or flags; no complete header
//	            within HeaderTimeout; no room opened within PendingWait; a
//	            room that expired; connection limit; server closing.
//	            The reason goes to the server's log.
//
// # Rooms
//
// A room is keyed by transfer id and lives in a map; an idle room costs no
// goroutine. Either side may come first:
//
//   - Prefill first (vLLM's source-first order): Open registers the room
//     when the KV becomes held; a decode connecting later waits in it.
//   - Decode first: the decode waits for at most PendingWait for Open. An id
//     that was never issued cannot be told apart from one not issued yet, so
//     it too waits out PendingWait and then gets ERROR.
//
// Complete answers ACK and Abort answers ABORT to every decode waiting in
// the room. The room then stays as a tombstone, ACK for CompletedTTL and
// ABORT for AbortedTTL, so a decode arriving just after still gets the
// outcome (a late decode for an aborted transfer gets ABORT, a clean error,
// never a hang). A decode arriving after the TTL gets ERROR: at once if the
// tombstone is still in the map, otherwise after PendingWait, as for an
// unknown id. Tombstones are expired lazily by the calls that use the
// server, with no janitor goroutine.
//
// Once a room is open, a waiting decode has no server-side timer: the
// prefill side's abort timeout is authoritative, and it ends the wait with
// Abort.
//
// # Order of events (vLLM, source-first)
//
//  1. Prefill finishes and holds KV. The engine takes an id from
//     NextTransferID, calls Server.Open(id), and returns
//     Server.VLLMParams(id) with the first token.
//  2. The decode worker parses the params (ParseVLLMParams), reserves its
//     destination blocks and sequence slot, then calls
//     Await(ctx, params.Addr(), id, requestID).
//  3. When the room is open and the header has been read — whichever came
//     last — the server calls Config.OnDecodeArrived(id, requestID) on that
//     connection's goroutine. This is the prefill side's cue to start the
//     modeled transfer. It fires once per room, for the first decode
//     connection found there once the room is open (when several decodes
//     wait before Open, the earliest parked). A decode that connects again
//     for the same transfer, after a dropped connection or as a duplicate,
//     gets no second call: it just waits for the outcome, so the prefill
//     side never starts the transfer twice. The call is skipped if the
//     room was resolved before the connection's goroutine got to it;
//     rarely, a concurrent Abort lands between that check and the call, so
//     treat an arrival for a transfer already ended as a no-op. The request
//     id passed is the first decode's; a caller that checks it against its
//     own record should expect the one it handed out.
//  4. After the modeled delay the engine calls Complete(id) (releasing the
//     source KV) and Await returns StatusACK; or, if the abort timeout fires
//     first, the engine calls Abort(id) and Await returns an error matching
//     ErrAborted.
//
// OnDecodeArrived holds its connection's goroutine while it runs, and Close
// waits for it: it must not block on anything that waits for Close.
//
// # Limits
//
// MaxRooms bounds open rooms (Open fails with ErrRoomsFull). MaxConns
// bounds decode connections; each waiting decode holds exactly one
// goroutine, and connections beyond the limit are answered ERROR and closed
// without one (the warning for this is logged at most once every 10 s,
// with a count of the refusals in between). MaxTombstones bounds resolved rooms. HeaderTimeout bounds the
// header read and the status write.
package bootstrap
