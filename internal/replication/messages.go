package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the first byte of every replication message. A decoder
// refuses any other value, so a node speaking a later format is told so
// instead of being misread.
const Version = 1

// Kind is a message's second byte. Values are part of the protocol: never
// renumber them.
type Kind uint8

const (
	KindAppend      Kind = 1
	KindAck         Kind = 2
	KindBehind      Kind = 3
	KindFence       Kind = 4
	KindFenceAnswer Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindAppend:
		return "append"
	case KindAck:
		return "ack"
	case KindBehind:
		return "behind"
	case KindFence:
		return "fence"
	case KindFenceAnswer:
		return "fence-answer"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// MaxAppendBytes bounds the batches one Append carries: a decoder refuses
// more before allocating. It is twice the largest batch, so one batch of
// any legal size always fits.
const MaxAppendBytes = 64 << 20

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("replication: malformed message")

// Message is one of Append, Ack, Behind, Fence and FenceAnswer.
type Message interface {
	Kind() Kind
	// AppendTo appends the message's encoding to dst.
	AppendTo(dst []byte) []byte
}

// Append carries the batches [Base, End) of a segment from its primary
// to a follower, and the primary's commit watermark. An Append without
// batches (Base == End) only carries the watermark and asks the follower
// where it stands.
type Append struct {
	Segment   uint64
	Base, End uint64
	Watermark uint64
	// Batches are whole batches in the storage encoding, concatenated,
	// each stamped with its offsets; the first starts at Base and the
	// last ends at End.
	Batches []byte
}

// Ack tells the primary a follower has fsynced everything below End.
type Ack struct{ Segment, End uint64 }

// Behind tells the primary a follower holds everything below Has and
// nothing at or above it: what it was sent does not start there.
type Behind struct{ Segment, Has uint64 }

// Fence asks a replica to stop taking appends of Segment and to answer
// its end.
type Fence struct{ Segment uint64 }

// FenceAnswer is a fenced replica's end: everything appended for the
// primary, the fsynced end for a follower (see the package doc). Role
// says which of the two answered: a failover counts only followers.
type FenceAnswer struct {
	Segment, End uint64
	Role         Role
	// Unknown says End tells nothing of what the copy acknowledged: the
	// node held no copy until the fence created one (a replaced disk, or
	// one never reached), so its empty copy may stand in for one that
	// acknowledged records. A failover must not let it pull the seal
	// down. Encoded as one trailing byte only when set: an answer without
	// it is byte for byte the older one.
	Unknown bool
}

// Role is the state machine that produced a fence answer. The zero value
// is the follower's: a failover asks followers, and only a Primary's
// FenceAnswer says otherwise.
type Role uint8

const (
	RoleFollower Role = 0
	RolePrimary  Role = 1
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RolePrimary:
		return "primary"
	}
	return fmt.Sprintf("role-%d", uint8(r))
}

func (Append) Kind() Kind      { return KindAppend }
func (Ack) Kind() Kind         { return KindAck }
func (Behind) Kind() Kind      { return KindBehind }
func (Fence) Kind() Kind       { return KindFence }
func (FenceAnswer) Kind() Kind { return KindFenceAnswer }

// AppendHeaderBytes bounds what an Append holds besides its batches.
const AppendHeaderBytes = 2 + 5*binary.MaxVarintLen64

func (m Append) AppendTo(dst []byte) []byte {
	dst = header(dst, KindAppend)
	dst = binary.AppendUvarint(dst, m.Segment)
	dst = binary.AppendUvarint(dst, m.Base)
	dst = binary.AppendUvarint(dst, m.End)
	dst = binary.AppendUvarint(dst, m.Watermark)
	dst = binary.AppendUvarint(dst, uint64(len(m.Batches)))
	return append(dst, m.Batches...)
}

func (m Ack) AppendTo(dst []byte) []byte    { return pair(dst, KindAck, m.Segment, m.End) }
func (m Behind) AppendTo(dst []byte) []byte { return pair(dst, KindBehind, m.Segment, m.Has) }
func (m Fence) AppendTo(dst []byte) []byte {
	return binary.AppendUvarint(header(dst, KindFence), m.Segment)
}
func (m FenceAnswer) AppendTo(dst []byte) []byte {
	dst = append(pair(dst, KindFenceAnswer, m.Segment, m.End), byte(m.Role))
	if m.Unknown {
		dst = append(dst, 1)
	}
	return dst
}

// Encode returns m's encoding in a new buffer.
func Encode(m Message) []byte {
	n := 2 + 3*binary.MaxVarintLen64
	if a, ok := m.(Append); ok {
		n = AppendHeaderBytes + len(a.Batches)
	}
	return m.AppendTo(make([]byte, 0, n))
}

func header(dst []byte, k Kind) []byte { return append(dst, Version, byte(k)) }

func pair(dst []byte, k Kind, a, b uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(header(dst, k), a), b)
}

// Decode reads one message. It refuses an unknown version or kind,
// truncated input, trailing bytes, an Append whose End is below its Base,
// batches longer than MaxAppendBytes, batches that do not tile [Base,
// End) (framing and offsets; their CRCs are the store's to check), and
// an unknown Role. An Append's Batches are a copy: the caller may reuse
// msg.
func Decode(msg []byte) (Message, error) {
	d := decoder{buf: msg}
	if v := d.byte(); d.err == nil && v != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, Version)
	}
	k := Kind(d.byte())
	if d.err != nil {
		return nil, d.err
	}
	var m Message
	switch k {
	case KindAppend:
		a := Append{Segment: d.u(), Base: d.u(), End: d.u(), Watermark: d.u()}
		a.Batches = d.bytes()
		if d.err == nil && a.End < a.Base {
			d.fail("append ends at %d, below its base %d", a.End, a.Base)
		}
		if d.err == nil {
			if end, err := runEnd(a.Batches, a.Base); err != nil {
				d.fail("%v", err)
			} else if end != a.End {
				d.fail("append of [%d, %d) holds batches ending at %d", a.Base, a.End, end)
			}
		}
		m = a
	case KindAck:
		m = Ack{Segment: d.u(), End: d.u()}
	case KindBehind:
		m = Behind{Segment: d.u(), Has: d.u()}
	case KindFence:
		m = Fence{Segment: d.u()}
	case KindFenceAnswer:
		a := FenceAnswer{Segment: d.u(), End: d.u(), Role: Role(d.byte())}
		if d.err == nil && a.Role > RolePrimary {
			d.fail("unknown role %d", a.Role)
		}
		if d.err == nil && len(d.buf) > 0 {
			if flag := d.byte(); flag != 1 {
				d.fail("unknown fence answer flag %d", flag)
			}
			a.Unknown = true
		}
		m = a
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, uint8(k))
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return m, nil
}

// decoder reads fields in order; the first failure sticks and later reads
// return zero values, so Decode checks once, at finish.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.fail("truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.u()
	if d.err != nil {
		return nil
	}
	if n > MaxAppendBytes || n > uint64(len(d.buf)) {
		d.fail("byte string of %d with %d bytes left", n, len(d.buf))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[:n])
	d.buf = d.buf[n:]
	return out
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	return d.err
}
