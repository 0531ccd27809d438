// Package bootstrap is the KV-transfer rendezvous between a prefill worker
// that holds a request's KV and the decode worker that takes it over: a TCP
// Server per prefill worker, the decode side (Await for one handoff, Client
// for many over kept connections), process-monotonic transfer ids
// (NextTransferID), per-transfer tokens (Server.Token) and the handoff
// params that travel with the request (VLLMParams, SGLangParams).
//
// The server is transport only. It does not decide whether or when a
// transfer completes: the prefill engine does, and tells the server with
// Complete or Abort.
//
// # Wire protocol, version 2
//
// The decode side connects and sends one 40-byte header, all integers
// little-endian:
//
//	offset  size  field
//	0       4     magic "MKVT"
//	4       2     version, u16 = 2
//	6       2     flags, u16: FlagKeepAlive (0x1) or 0; other bits are refused
//	8       8     transfer id, u64, non-zero
//	16      8     request id, u64 (the decode's, passed to OnDecodeArrived)
//	24      16    token: the transfer's secret from the handoff params
//
// Version 1 (24 bytes, no token) is refused. The magic and version are
// checked as soon as their 6 bytes arrive, so a stray client is answered at
// once. The decode then sends nothing more and must not half-close: the
// server reads on while it waits, and end-of-stream means the decode gave
// up. When the outcome is known the server writes exactly one status byte,
// then closes, or with FlagKeepAlive after ACK or ABORT reads the next
// header on the same connection:
//
//	0x01 ACK    the transfer is done; the decode activates the request
//	0x02 ABORT  the source aborted; the decode frees its reservation and
//	            fails the request as aborted
//	0x03 ERROR  refused: bad magic, version or flags; a token that does
//	            not match the transfer and request ids; no complete header
//	            within HeaderTimeout; no room opened within PendingWait; a
//	            room that expired; connection limit or eviction; server
//	            closing. The reason goes to the server's log.
//
// A kept-alive connection idle between transfers is never written to: the
// server closes it silently (IdleTimeout, eviction, Close), because its
// client would read any byte as the answer to its next header. Client
// replaces such a connection with a fresh dial.
//
// # Threat model
//
// Who can reach the port: anything that can open a TCP connection to the
// listener — in the in-process cluster every local process (it binds
// loopback), in a distributed deployment every host on the network the
// prefill advertises. Transfer ids are not secret: they count up from 1 in
// each process, so any of them can be guessed.
//
// What the token protects: the rooms. The token is an HMAC-SHA256 (cut to
// 16 bytes) of the transfer id and the request id under a 32-byte key the
// server draws from crypto/rand when it is built and never sends. The
// prefill hands it out only inside the handoff params, so only the decode
// that was given the params can present it. The server checks it, in
// constant time, right after the header and before the header reaches any
// room: a wrong token, a right token with another request id, or a token of
// another transfer gets ERROR, creates no pending room, is not reported to
// OnDecodeArrived and leaves the room armed for the real decode. Being a
// function of the ids, the token needs no per-room state and is checked
// even when the decode comes before Open.
//
// What it does not protect: the token travels in clear, in the params and
// on the wire (no TLS), so whoever can read the traffic between router,
// prefill and decode can replay it — for that transfer only, and only until
// the room's tombstone expires. Connections themselves are not
// authenticated before their header, so the port can still be flooded; the
// connection limits below bound what that costs and make unauthenticated
// connections give way to authenticated ones. An abort or a completion can
// only come from the prefill engine (Abort, Complete), never from the wire.
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
//     Server.VLLMParams(id, requestID), token included, with the first
//     token.
//  2. The decode worker parses the params (ParseVLLMParams), reserves its
//     destination blocks and sequence slot, then calls
//     Await(ctx, params.Addr(), id, requestID, params.TransferToken), or
//     Client.Await with the same arguments to reuse a connection.
//  3. When the room is open and an authentic header has been read —
//     whichever came last — the server calls Config.OnDecodeArrived(id, requestID) on that
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
//     id passed is the one the token was issued for: a header with another
//     request id never gets this far.
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
// bounds decode connections overall and MaxConnsPerHost those from one
// remote IP; each connection holds exactly one goroutine. At either limit
// a new connection evicts the oldest connection that has not authenticated
// (still sending its header, or idle between keep-alive transfers): an
// evicted header-sender gets ERROR, an idle one is closed silently. An
// authenticated decode waiting in a room is never evicted; when every
// connection is one, the new connection is answered ERROR and closed
// without a goroutine. Evictions, refusals and refused headers are each
// logged at most once every 10 s, with a count of those in between.
// MaxTombstones bounds resolved rooms. HeaderTimeout bounds the header read
// and the status write, IdleTimeout a kept connection's wait for its next
// header.
package bootstrap
