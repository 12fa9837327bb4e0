package membership

import (
	"encoding/binary"
	"fmt"
)

// Departed members travel in memberlist's push-pull state (the
// delegate's LocalState and MergeRemoteState), so that a node that joins
// after a member died or left still learns of it. memberlist does not
// tell it: a peer's dead or left entries only update nodes the joining
// node already knows. Without this, a node restarted just after another
// died would never hear of that one, and the broker counts the copies of
// a node it does not know as present (a node that just joined must not be
// healed around): the dead node's sealed segments would wait for ever
// wherever the restarted node was the one to take the new copy.
//
// What this node saw itself always wins: a departure learned from a peer
// is recorded only for an id the table does not know, never over a live
// entry, and a departed node that comes back is recorded alive by
// memberlist as any joining node is.
//
// Layout:
//
//	departedFormat(1) uvarint(count) count × (state(1) str(gossip addr) str(meta))
//
// where state is departedDead or departedLeft (not State's own numbers,
// which may change), meta is encodeMeta's layout without the leaving
// flag, and str is uvarint(len) followed by the bytes.
const departedFormat = 1

// The state byte of a departed member.
const (
	departedDead = 1
	departedLeft = 2
)

// encodeDeparted encodes ms, members that died or left; nil when there
// are none, so a push-pull carries no user state at all. A member whose
// metadata no longer encodes is left out.
func encodeDeparted(ms []Member) []byte {
	if len(ms) == 0 {
		return nil
	}
	var body []byte
	n := 0
	for _, m := range ms {
		meta, err := encodeMeta(m.NodeInfo, false)
		if err != nil || !departed(m.State) || len(m.GossipAddr) > MaxAddrLen {
			continue
		}
		state := byte(departedDead)
		if m.State == StateLeft {
			state = departedLeft
		}
		body = append(body, state)
		body = appendString(appendString(body, m.GossipAddr), string(meta))
		n++
	}
	if n == 0 {
		return nil
	}
	return append(binary.AppendUvarint([]byte{departedFormat}, uint64(n)), body...)
}

// decodeDeparted parses encodeDeparted's layout, at most limit members.
// It refuses an unknown format, a state other than dead or left, bad
// metadata, an address over MaxAddrLen, and trailing bytes.
func decodeDeparted(b []byte, limit int) ([]Member, error) {
	d := decoder{b: b}
	format := d.byte()
	count := d.uvarint()
	switch {
	case d.err != nil:
		return nil, fmt.Errorf("%w: departed members: %v", ErrInvalidNode, d.err)
	case format != departedFormat:
		return nil, fmt.Errorf("%w: departed members in format %d, this node reads %d", ErrInvalidNode, format, departedFormat)
	case count > uint64(limit):
		return nil, fmt.Errorf("%w: %d departed members, at most %d", ErrInvalidNode, count, limit)
	}
	out := make([]Member, 0, count)
	for range count {
		code, addr, meta := d.byte(), d.string(), d.string()
		if d.err != nil {
			return nil, fmt.Errorf("%w: departed members: %v", ErrInvalidNode, d.err)
		}
		state := StateDead
		switch code {
		case departedDead:
		case departedLeft:
			state = StateLeft
		default:
			return nil, fmt.Errorf("%w: departed member in state %d", ErrInvalidNode, code)
		}
		if len(addr) > MaxAddrLen {
			return nil, fmt.Errorf("%w: departed member's gossip address of %d bytes", ErrInvalidNode, len(addr))
		}
		info, _, err := decodeMeta([]byte(meta))
		if err != nil {
			return nil, err
		}
		out = append(out, Member{NodeInfo: info, GossipAddr: addr, State: state})
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: departed members: %d trailing bytes", ErrInvalidNode, len(d.b))
	}
	return out, nil
}

// learnDeparted records in t the members of ms, departures a peer
// reported, that t has never heard of, and answers those it recorded.
func learnDeparted(t *table, ms []Member) []Member {
	var out []Member
	for _, m := range ms {
		kind := EventDead
		if m.State == StateLeft {
			kind = EventLeave
		}
		if t.learn(kind, m) {
			out = append(out, m)
		}
	}
	return out
}

// departed reports whether s is a member that died or left.
func departed(s State) bool { return s == StateDead || s == StateLeft }
