package plane

import (
	"time"
)

// The reliability pieces of the request plane (wire.go says how the
// protocol goes). They take inputs plus "now" and return what to do, with
// no I/O of their own: the worker's loop and the router's transport drive
// them.

const (
	// RetransmitAfter is how long (wall time) a router waits for a
	// command's acknowledgement, or for missing frames, before it asks
	// again. Far above a healthy round trip on a busy host, far below the
	// seconds a NATS restart takes.
	RetransmitAfter = 500 * time.Millisecond
	// AckEvery is how long a router lets applied frames go unacknowledged
	// when it has no command to carry the ack.
	AckEvery = 200 * time.Millisecond
	// AckDelay is how long a worker lets acks wait for a frame to carry
	// them before it sends them alone: a small part of RetransmitAfter.
	// A worker on its own clock lets the outputs that report nothing but
	// its load (WireOutput.LoadOnly) wait as long for company too.
	AckDelay = 20 * time.Millisecond
	// HeartbeatEvery is how often a worker whose routers lag behind its
	// frames tells them its Head.
	HeartbeatEvery = 250 * time.Millisecond
	// SessionIdle is how long a worker keeps telling a silent router
	// session its Head: past it the router is presumed gone (a router
	// that is still there asks for a resend after its own reconnect).
	SessionIdle = 30 * time.Second
	// FrameBufferFrames and FrameBufferBytes bound the frames a worker
	// keeps for resending.
	FrameBufferFrames = 1 << 16
	FrameBufferBytes  = 64 << 20
	// HeldCommandsMax and HeldBytesMax bound the commands a session holds
	// ahead of a gap; one past them is dropped (its router publishes it
	// again once the gap is filled and it is still unacknowledged).
	HeldCommandsMax = 4096
	HeldBytesMax    = 16 << 20
	// ClosedSessionsMax bounds the ended sessions a worker remembers, so
	// that a recorded hello replayed after its session ended does not
	// start it again. The record of a router's sessions goes with its
	// key, which its hellos need.
	ClosedSessionsMax = 1 << 16
)
