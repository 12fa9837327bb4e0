package raft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A frame carries everything one node sends another in one cycle, for all
// groups. Heartbeats and heartbeat responses without a read context are
// coalesced into compact records (CockroachDB's approach); every other
// message travels whole as raftpb bytes.
//
//	version:1 from:uvarint
//	nHeartbeats:uvarint   {group term commit}:uvarint...
//	nResponses:uvarint    {group term}:uvarint...
//	nMessages:uvarint     {group len}:uvarint raftpb.Message...
const frameVersion = 1

// frameHeaderBytes bounds what a frame adds to its records: the version,
// the sender and three counts.
const frameHeaderBytes = 1 + 4*binary.MaxVarintLen64

type heartbeat struct {
	group, term, commit uint64
}

// groupMessage is a whole raft message as received: its raftpb bytes,
// checked by scanMessage and unmarshalled only when it is stepped, so a
// frame of many small messages does not hold a protobuf message (about
// 200 bytes and a pointer per field) for each of its records at once.
type groupMessage struct {
	group uint64
	body  []byte
}

func (gm groupMessage) decode() (*pb.Message, error) {
	m := &pb.Message{}
	if err := proto.Unmarshal(gm.body, m); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	return m, nil
}

// frame is one decoded frame.
type frame struct {
	from       uint64
	heartbeats []heartbeat
	responses  []heartbeat
	messages   []groupMessage
}

// coalescible reports whether m can travel as a heartbeat record: the
// record keeps group, term and commit and drops the context, so a heartbeat
// that carries a ReadIndex context must travel whole.
func coalescible(m *pb.Message) bool {
	t := m.GetType()
	return (t == pb.MsgHeartbeat || t == pb.MsgHeartbeatResp) && len(m.GetContext()) == 0
}

// frameBuilder accumulates one destination's share of a cycle.
type frameBuilder struct {
	heartbeats []heartbeat
	responses  []heartbeat
	messages   [][]byte // group:uvarint len:uvarint bytes, pre-encoded
	groups     []uint64 // group of each messages[i]
	types      []pb.MessageType
	size       int
}

// add appends m and returns the bytes it adds to the frame.
func (b *frameBuilder) add(group uint64, m *pb.Message) (int, error) {
	if coalescible(m) {
		hb := heartbeat{group: group, term: m.GetTerm(), commit: m.GetCommit()}
		n := uvarintLen(hb.group) + uvarintLen(hb.term)
		if m.GetType() == pb.MsgHeartbeat {
			n += uvarintLen(hb.commit)
			b.heartbeats = append(b.heartbeats, hb)
		} else {
			b.responses = append(b.responses, hb)
		}
		b.size += n
		return n, nil
	}
	body, err := proto.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("raft: encode %v: %w", m.GetType(), err)
	}
	rec := binary.AppendUvarint(nil, group)
	rec = binary.AppendUvarint(rec, uint64(len(body)))
	rec = append(rec, body...)
	b.messages = append(b.messages, rec)
	b.groups = append(b.groups, group)
	b.types = append(b.types, m.GetType())
	b.size += len(rec)
	return len(rec), nil
}

func (b *frameBuilder) empty() bool {
	return len(b.heartbeats) == 0 && len(b.responses) == 0 && len(b.messages) == 0
}

func (b *frameBuilder) encode(from uint64) []byte {
	out := make([]byte, 0, b.size+4*binary.MaxVarintLen64)
	out = append(out, frameVersion)
	out = binary.AppendUvarint(out, from)
	out = binary.AppendUvarint(out, uint64(len(b.heartbeats)))
	for _, hb := range b.heartbeats {
		out = binary.AppendUvarint(out, hb.group)
		out = binary.AppendUvarint(out, hb.term)
		out = binary.AppendUvarint(out, hb.commit)
	}
	out = binary.AppendUvarint(out, uint64(len(b.responses)))
	for _, hb := range b.responses {
		out = binary.AppendUvarint(out, hb.group)
		out = binary.AppendUvarint(out, hb.term)
	}
	out = binary.AppendUvarint(out, uint64(len(b.messages)))
	for _, rec := range b.messages {
		out = append(out, rec...)
	}
	return out
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

var errBadFrame = errors.New("raft: malformed frame")

type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadFrame
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a record count and refuses one that the remaining bytes
// cannot hold at minRecord bytes a record, so a corrupt count cannot make
// the decoder allocate.
func (r *frameReader) count(minRecord int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/minRecord) {
		r.err = errBadFrame
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// Every message raft sends carries its type, receiver and sender (two
// bytes each at least), so a message record takes at least 8 bytes of a
// frame and costs the decoder 32: a frame of many small messages cannot
// make the host allocate much more than it received. Entries are bounded
// by count (Options.MaxMessageEntries), since a message is stepped, and
// its entries allocated, one at a time.
const minMessageBytes = 6

// Field numbers in raftpb.Message that scanMessage looks at.
const (
	fieldType      = 1
	fieldTo        = 2
	fieldFrom      = 3
	fieldEntries   = 7
	fieldResponses = 14 // local messages only (MsgStorage*)
)

// scanMessage checks a message's raftpb bytes without allocating: the
// fields parse, the type, receiver and sender are present, there are at
// most maxEntries entries and no nested responses.
func scanMessage(b []byte, maxEntries int) error {
	var seen [fieldFrom + 1]bool
	entries := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errBadFrame, protowire.ParseError(n))
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errBadFrame, protowire.ParseError(n))
		}
		switch {
		case num <= fieldFrom:
			seen[num] = seen[num] || typ == protowire.VarintType
		case num == fieldEntries:
			if entries++; entries > maxEntries {
				return fmt.Errorf("%w: more than %d entries in a message", errBadFrame, maxEntries)
			}
		case num == fieldResponses:
			return fmt.Errorf("%w: a local message's responses", errBadFrame)
		}
		b = b[n:]
	}
	if !seen[fieldType] || !seen[fieldTo] || !seen[fieldFrom] {
		return fmt.Errorf("%w: a message without its type, receiver or sender", errBadFrame)
	}
	return nil
}

// decodeFrame decodes a frame's records; whole messages are checked
// (scanMessage) but kept as bytes, aliasing b.
func decodeFrame(b []byte, maxEntries int) (frame, error) {
	if len(b) < 1 || b[0] != frameVersion {
		return frame{}, errBadFrame
	}
	r := frameReader{b: b[1:]}
	f := frame{from: r.uvarint()}
	n := r.count(3)
	f.heartbeats = make([]heartbeat, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		f.heartbeats = append(f.heartbeats, heartbeat{group: r.uvarint(), term: r.uvarint(), commit: r.uvarint()})
	}
	n = r.count(2)
	f.responses = make([]heartbeat, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		f.responses = append(f.responses, heartbeat{group: r.uvarint(), term: r.uvarint()})
	}
	n = r.count(2 + minMessageBytes)
	f.messages = make([]groupMessage, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		group, size := r.uvarint(), r.uvarint()
		if r.err != nil || size > uint64(len(r.b)) {
			return frame{}, errBadFrame
		}
		body := r.b[:size:size]
		if err := scanMessage(body, maxEntries); err != nil {
			return frame{}, err
		}
		r.b = r.b[size:]
		f.messages = append(f.messages, groupMessage{group: group, body: body})
	}
	if r.err != nil {
		return frame{}, r.err
	}
	if len(r.b) != 0 {
		return frame{}, fmt.Errorf("%w: %d trailing bytes", errBadFrame, len(r.b))
	}
	return f, nil
}

// expand turns a heartbeat record back into the message raft expects.
func (hb heartbeat) expand(typ pb.MessageType, from, to uint64) *pb.Message {
	m := &pb.Message{Type: typ.Enum(), From: new(from), To: new(to), Term: new(hb.term)}
	if typ == pb.MsgHeartbeat {
		m.Commit = new(hb.commit)
	}
	return m
}
