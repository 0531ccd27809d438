package plane

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Integrity of the request plane. NATS credentials say who may use the
// bus, not who said what on it: anyone allowed to publish on a worker's
// subjects could otherwise drop it from routing, end another router's
// session or replace its frames. So every command and frame is sealed
// with a MAC under a key only its router session and its worker know, and
// whatever fails is dropped and counted, never applied.
//
// Keys. Each worker process and each router makes an X25519 key pair when
// it starts and publishes the public half in its etcd record, which lives
// under its own lease (Registration.PlaneKey, RouterRegistration.PlaneKey).
// A session's key is HKDF-SHA256 over the X25519 secret of the router's
// and the worker's pairs, salted with the session id and bound to the
// namespace, the worker's instance id and the router's lease id
// (SessionKey). Nothing secret crosses the bus or etcd: etcd is trusted
// for who is who (whoever may write the namespace's keys may register a
// router or a worker: lock etcd down, docs/distributed-security.md), the
// bus for nothing.
//
// Seal. A sealed message is the body behind its tags:
//
//	version (1 byte, WireVersion) | count n (2 bytes, big endian)
//	n × ( id (8 bytes, big endian) | HMAC-SHA256 (32 bytes) )
//	body (MessagePack, codec.go)
//
// A command message (one or more commands of one session: what a turn of
// the router's loop gave the worker) has one tag, its session's; a frame
// one per session the worker serves (every router reads every frame); a
// router's own departure marker one under a key of its own (leaveTag).
// The MAC covers the direction, the id, the subject (so the worker) and
// the body, whose every command carries the session's Seq: one MAC per
// message, not per command. A command cannot be replayed as a frame, to
// another worker or with another body, and the reliable plane applies a
// Seq once.
const (
	sealVersion = WireVersion
	sealTagSize = 8 + sha256.Size
	// MaxSealTags bounds the tags of one message, so the sessions one
	// worker serves at once.
	MaxSealTags = 256
)

// Message directions, the MAC's first byte.
const (
	DirCommand byte = 'c'
	DirFrame   byte = 'f'
)

// SealTag is one id's MAC.
type SealTag struct {
	ID  uint64
	mac [sha256.Size]byte
}

// Keyed is a MAC key and the id its tag is filed under; MAC, when set,
// is the same key kept ready (NewMAC), which Seal then uses.
type Keyed struct {
	ID  uint64
	Key []byte
	MAC *MAC
}

// MAC is a key's HMAC kept keyed between messages, for a key that seals
// or checks many (a session's): hmac.New hashes the key into its pads on
// every call, a reset does not, and nothing is allocated per message. It
// is safe for concurrent use.
type MAC struct {
	mu      sync.Mutex
	h       hash.Hash
	scratch []byte
}

// NewMAC readies key.
func NewMAC(key []byte) *MAC { return &MAC{h: hmac.New(sha256.New, key)} }

func (m *MAC) sum(dir byte, id uint64, subject string, body []byte) [sha256.Size]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.h.Reset()
	m.scratch = binary.BigEndian.AppendUint64(append(m.scratch[:0], dir), id)
	m.scratch = append(append(m.scratch, subject...), 0)
	m.h.Write(m.scratch)
	m.h.Write(body)
	var out [sha256.Size]byte
	m.h.Sum(out[:0])
	return out
}

// Verify reports whether t is the MAC of body under m's key.
func (m *MAC) Verify(t SealTag, dir byte, subject string, body []byte) bool {
	s := m.sum(dir, t.ID, subject, body)
	return hmac.Equal(s[:], t.mac[:])
}

// mac computes a tag's MAC.
func mac(key []byte, dir byte, id uint64, subject string, body []byte) [sha256.Size]byte {
	h := hmac.New(sha256.New, key)
	var hdr [9]byte
	hdr[0] = dir
	binary.BigEndian.PutUint64(hdr[1:], id)
	h.Write(hdr[:])
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write(body)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Seal returns body behind a tag for each key.
func Seal(dir byte, subject string, body []byte, keys ...Keyed) []byte {
	return AppendSeal(nil, dir, subject, body, keys...)
}

// AppendSeal appends the sealed message Seal returns to dst: a sender
// that seals one message at a time (its own goroutine, or under its
// lock) keeps dst[:0] between messages and allocates nothing once warm.
// NATS's Publish copies the message before it returns, so the buffer is
// free again as soon as Publish is. body must not share dst's memory.
func AppendSeal(dst []byte, dir byte, subject string, body []byte, keys ...Keyed) []byte {
	if len(keys) > MaxSealTags {
		keys = keys[:MaxSealTags]
	}
	out := slices.Grow(dst, 3+len(keys)*sealTagSize+len(body))
	out = binary.BigEndian.AppendUint16(append(out, sealVersion), uint16(len(keys)))
	for _, k := range keys {
		out = binary.BigEndian.AppendUint64(out, k.ID)
		var m [sha256.Size]byte
		if k.MAC != nil {
			m = k.MAC.sum(dir, k.ID, subject, body)
		} else {
			m = mac(k.Key, dir, k.ID, subject, body)
		}
		out = append(out, m[:]...)
	}
	return append(out, body...)
}

// errMalformed is a message that is not a sealed one at all.
var errMalformed = errors.New("not a sealed message")

// Unseal splits a sealed message into its tags and body; nothing in it is
// trusted until verify says so.
func Unseal(data []byte) ([]SealTag, []byte, error) {
	if len(data) < 3 {
		return nil, nil, errMalformed
	}
	if data[0] != sealVersion {
		return nil, nil, &VersionError{Got: data[0], Want: sealVersion}
	}
	n := int(binary.BigEndian.Uint16(data[1:]))
	if n > MaxSealTags || len(data) < 3+n*sealTagSize {
		return nil, nil, errMalformed
	}
	tags := make([]SealTag, n)
	p := data[3:]
	for i := range tags {
		tags[i].ID = binary.BigEndian.Uint64(p)
		copy(tags[i].mac[:], p[8:sealTagSize])
		p = p[sealTagSize:]
	}
	return tags, p, nil
}

// TagOf finds id's tag.
func TagOf(tags []SealTag, id uint64) (SealTag, bool) {
	for _, t := range tags {
		if t.ID == id {
			return t, true
		}
	}
	return SealTag{}, false
}

// Verify reports whether t is the MAC of body under key.
func Verify(t SealTag, key []byte, dir byte, subject string, body []byte) bool {
	m := mac(key, dir, t.ID, subject, body)
	return hmac.Equal(m[:], t.mac[:])
}

// KeyPair is a worker's or a router's X25519 key pair.
type KeyPair struct{ priv *ecdh.PrivateKey }

// NewKeyPair makes a key pair from the OS's randomness.
func NewKeyPair() (KeyPair, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("plane key: %w", err)
	}
	return KeyPair{priv: k}, nil
}

// Public is the pair's public half as etcd records carry it.
func (k KeyPair) Public() string {
	return base64.StdEncoding.EncodeToString(k.priv.PublicKey().Bytes())
}

// SessionKey derives the MAC key of session between worker instance and
// router (lease ids) in namespace ns, from this side's pair and the other
// side's public half (base64, as etcd carries it).
func (k KeyPair) SessionKey(peer string, ns string, instance, router int64, session uint64) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(peer)
	if err != nil {
		return nil, fmt.Errorf("plane key: %w", err)
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("plane key: %w", err)
	}
	secret, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("plane key: %w", err)
	}
	salt := binary.BigEndian.AppendUint64(nil, session)
	info := fmt.Sprintf("mocker request plane v1\x00%s\x00%x\x00%x", ns, instance, router)
	return hkdf.Key(sha256.New, secret, salt, info, sha256.Size)
}

// NewSessionID is an unguessable, non-zero session id.
func NewSessionID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// NewMACKey is a random key for what one process seals to itself.
func NewMACKey() []byte {
	b := make([]byte, sha256.Size)
	_, _ = rand.Read(b)
	return b
}

// Rejection reasons, as PlaneStats counts them.
const (
	RejectMalformed      = "malformed"       // not sealed, or its body unreadable
	RejectBadMAC         = "bad_mac"         // a tag that does not verify
	RejectUnknownSession = "unknown_session" // no key for it here
	RejectUnknownRouter  = "unknown_router"  // a hello naming no registered router
	RejectLimit          = "limit"           // a bound on held state reached
	RejectVersion        = "wire_version"    // sealed under another WireVersion
	// RejectUnadvertised is a decode's connect to a transfer address no
	// registered prefill advertised.
	RejectUnadvertised = "unadvertised_address"
)

// Rejections counts dropped messages by reason; safe for concurrent use.
type Rejections struct {
	malformed, badMAC, unknownSession, unknownRouter, limit, unadvertised, version atomic.Uint64
	logged                                                                         atomic.Int64 // UnixNano of the last LogDue
}

// LogDue reports whether a drop is worth a log line now: one per
// RejectLogEvery at most, however many messages a flood drops.
func (r *Rejections) LogDue() bool {
	now := time.Now().UnixNano()
	last := r.logged.Load()
	return now-last >= int64(RejectLogEvery) && r.logged.CompareAndSwap(last, now)
}

// Add counts one message dropped for reason.
func (r *Rejections) Add(reason string) {
	switch reason {
	case RejectMalformed:
		r.malformed.Add(1)
	case RejectBadMAC:
		r.badMAC.Add(1)
	case RejectUnknownSession:
		r.unknownSession.Add(1)
	case RejectUnknownRouter:
		r.unknownRouter.Add(1)
	case RejectLimit:
		r.limit.Add(1)
	case RejectUnadvertised:
		r.unadvertised.Add(1)
	case RejectVersion:
		r.version.Add(1)
	}
}

// Total is every message dropped.
func (r *Rejections) Total() uint64 {
	return r.malformed.Load() + r.badMAC.Load() + r.unknownSession.Load() + r.unknownRouter.Load() + r.limit.Load() +
		r.unadvertised.Load() + r.version.Load()
}

// ByReason is the counts by reason, the zero ones left out.
func (r *Rejections) ByReason() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range []struct {
		name string
		n    uint64
	}{{RejectMalformed, r.malformed.Load()}, {RejectBadMAC, r.badMAC.Load()}, {RejectUnknownSession, r.unknownSession.Load()},
		{RejectUnknownRouter, r.unknownRouter.Load()}, {RejectLimit, r.limit.Load()}, {RejectUnadvertised, r.unadvertised.Load()},
		{RejectVersion, r.version.Load()}} {
		if c.n > 0 {
			out[c.name] = c.n
		}
	}
	return out
}

// RejectLogEvery spaces the warnings about dropped messages: a flood of
// forged ones must not become a flood of logs.
const RejectLogEvery = 5 * time.Second
