package dataplane

import "fmt"

// KindGroup is a consumer-group operation sent to the coordinator of a
// topic's groups: the node leading the topic's vnode.
const KindGroup Kind = 7

// GroupOp says what a Group request asks of the coordinator. Values are
// part of the protocol: never renumber them.
type GroupOp uint8

const (
	// GroupJoin joins or polls a member: the answer is its generation
	// and ranges.
	GroupJoin GroupOp = 1
	// GroupTouch keeps a member alive without a new assignment: the
	// answer is the generation, the ranges it reads (Held) and the live
	// members (Count).
	GroupTouch GroupOp = 2
	// GroupCommit checks a member's commit made under Generation: the
	// answer's Ranges are those it may advance.
	GroupCommit GroupOp = 3
	// GroupLeave removes a member: Live says whether it was one.
	GroupLeave GroupOp = 4
	// GroupMembers describes a group: generation, Live (it has members)
	// and Members.
	GroupMembers GroupOp = 5
	// GroupLive lists the topic's groups with members, in Groups.
	GroupLive GroupOp = 6
)

func (o GroupOp) String() string {
	switch o {
	case GroupJoin:
		return "join"
	case GroupTouch:
		return "touch"
	case GroupCommit:
		return "commit"
	case GroupLeave:
		return "leave"
	case GroupMembers:
		return "members"
	case GroupLive:
		return "live"
	}
	return fmt.Sprintf("op-%d", uint8(o))
}

// MaxNameBytes bounds a group, member or owner name in a group message;
// the coordinator refuses names longer than 255 bytes anyway.
const MaxNameBytes = 1024

// NamesFit reports whether the message's names fit MaxNameBytes, as its
// decoder requires: a sender checks it first, since a coordinator can
// only refuse a message it cannot decode.
func (m *Group) NamesFit() bool {
	return len(m.Group) <= MaxNameBytes && len(m.Member) <= MaxNameBytes && len(m.Owner) <= MaxNameBytes
}

// Group asks the coordinator of Topic's groups for one operation. The
// fields an operation does not use are empty.
type Group struct {
	Op                   GroupOp
	Topic                uint64
	Group, Member, Owner string
	Generation           uint64
}

// GroupMember is one live member of a group as GroupMembers lists it.
type GroupMember struct {
	Name     string
	LastSeen int64 // unix ms
	Ranges   []uint64
}

// GroupEntry is one entry of a group's committed position (an
// internal/cursor entry): every record of Source in the key slice
// [SliceStart, SliceStart + 2^SliceBits) below Offset is consumed.
type GroupEntry struct {
	Source, SliceStart uint64
	SliceBits          uint8
	Offset             uint64
}

// GroupAnswer is the coordinator's answer; each operation fills the
// fields its documentation names and leaves the others empty. A join's
// answer also carries Committed: the group's committed position for the
// member's ranges as the coordinator knows it, so that a member polling
// through a node whose replica lags starts a range handed over to it
// from its previous holder's last commit.
type GroupAnswer struct {
	Generation  uint64
	Live        bool
	Ranges      []uint64
	Held, Count uint64
	Members     []GroupMember
	Groups      []string
	Committed   []GroupEntry
}

func (m *Group) Encode() []byte {
	e := encoder{buf: make([]byte, 0, 32+len(m.Group)+len(m.Member)+len(m.Owner))}
	e.kind(KindGroup)
	e.buf = append(e.buf, byte(m.Op))
	e.u(m.Topic)
	e.bytes([]byte(m.Group))
	e.bytes([]byte(m.Member))
	e.bytes([]byte(m.Owner))
	e.u(m.Generation)
	return e.buf
}

func DecodeGroup(msg []byte) (Group, error) {
	d := decoder{buf: msg}
	d.kind(KindGroup)
	m := Group{Op: GroupOp(d.byte()), Topic: d.u(), Group: d.name(), Member: d.name(), Owner: d.name(), Generation: d.u()}
	if d.err == nil && (m.Op < GroupJoin || m.Op > GroupLive) {
		d.fail("group operation %v", m.Op)
	}
	return m, d.finish()
}

func (m *GroupAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.u(m.Generation)
	e.flag(m.Live)
	e.ids(m.Ranges)
	e.u(m.Held)
	e.u(m.Count)
	e.u(uint64(len(m.Members)))
	for _, x := range m.Members {
		e.bytes([]byte(x.Name))
		e.i(x.LastSeen)
		e.ids(x.Ranges)
	}
	e.u(uint64(len(m.Groups)))
	for _, g := range m.Groups {
		e.bytes([]byte(g))
	}
	e.u(uint64(len(m.Committed)))
	for _, x := range m.Committed {
		e.u(x.Source)
		e.u(x.SliceStart)
		e.u(uint64(x.SliceBits))
		e.u(x.Offset)
	}
	return e.buf
}

func DecodeGroupAnswer(msg []byte) (GroupAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return GroupAnswer{}, err
	}
	m := GroupAnswer{Generation: d.u(), Live: d.flag(), Ranges: d.ids(), Held: d.u(), Count: d.u()}
	n := d.count(3) // a name's length, a time and a range count
	for range n {
		m.Members = append(m.Members, GroupMember{Name: d.name(), LastSeen: d.i(), Ranges: d.ids()})
	}
	n = d.count(1)
	for range n {
		m.Groups = append(m.Groups, d.name())
	}
	n = d.count(4)
	for range n {
		x := GroupEntry{Source: d.u(), SliceStart: d.u()}
		if bits := d.u(); bits <= 64 {
			x.SliceBits = uint8(bits)
		} else {
			d.fail("an entry's slice of 2^%d positions", bits)
		}
		x.Offset = d.u()
		m.Committed = append(m.Committed, x)
	}
	return m, d.finish()
}

func (e *encoder) ids(ids []uint64) {
	e.u(uint64(len(ids)))
	for _, id := range ids {
		e.u(id)
	}
}

func (d *decoder) ids() []uint64 {
	n := d.count(1)
	var out []uint64
	for range n {
		out = append(out, d.u())
	}
	return out
}

// name reads a text of at most MaxNameBytes.
func (d *decoder) name() string {
	if d.err != nil {
		return ""
	}
	rest := d.buf
	if n := d.u(); d.err == nil && n > MaxNameBytes {
		d.fail("name of %d bytes (at most %d)", n, MaxNameBytes)
		return ""
	}
	d.buf = rest
	return string(d.bytes())
}
