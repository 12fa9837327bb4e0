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

// departedEntryMin is the fewest bytes one entry takes: its state and
// two empty strings.
const departedEntryMin = 3

// decodeDeparted parses encodeDeparted's layout and answers at most limit
// members: those past it are not read (a peer allowed more members than
// this node). An entry this node cannot take (a state other than dead or
// left, metadata that does not decode or validate, an address over
// MaxAddrLen) is skipped alone, so one entry a newer peer writes, or a
// stricter check here refuses, does not cost the others; skipped counts
// them. It refuses the whole state only when the framing is broken: an
// unknown format, a count the bytes cannot hold, a truncated entry, or
// trailing bytes.
func decodeDeparted(b []byte, limit int) (out []Member, skipped int, err error) {
	d := decoder{b: b}
	format := d.byte()
	count := d.uvarint()
	switch {
	case d.err != nil:
		return nil, 0, fmt.Errorf("%w: departed members: %v", ErrInvalidNode, d.err)
	case format != departedFormat:
		return nil, 0, fmt.Errorf("%w: departed members in format %d, this node reads %d", ErrInvalidNode, format, departedFormat)
	case count > uint64(len(d.b)/departedEntryMin):
		return nil, 0, fmt.Errorf("%w: %d departed members in %d bytes", ErrInvalidNode, count, len(d.b))
	}
	out = make([]Member, 0, min(count, uint64(max(limit, 0))))
	for i := uint64(0); i < count && len(out) < limit; i++ {
		code, addr, meta := d.byte(), d.string(), d.string()
		if d.err != nil {
			return nil, 0, fmt.Errorf("%w: departed members: %v", ErrInvalidNode, d.err)
		}
		m, ok := departedEntry(code, addr, meta)
		if !ok {
			skipped++
			continue
		}
		out = append(out, m)
	}
	if len(out) < limit && len(d.b) != 0 {
		return nil, 0, fmt.Errorf("%w: departed members: %d trailing bytes", ErrInvalidNode, len(d.b))
	}
	return out, skipped, nil
}

// departedEntry is one decoded entry, unless this node cannot take it.
func departedEntry(code byte, addr, meta string) (Member, bool) {
	state := StateDead
	switch code {
	case departedDead:
	case departedLeft:
		state = StateLeft
	default:
		return Member{}, false
	}
	if len(addr) > MaxAddrLen {
		return Member{}, false
	}
	info, _, err := decodeMeta([]byte(meta))
	if err != nil {
		return Member{}, false
	}
	return Member{NodeInfo: info, GossipAddr: addr, State: state}, true
}

// learnDeparted records in t the members of ms, departures a peer
// reported, that t has never heard of, and answers how many it recorded.
func learnDeparted(t *table, ms []Member) int {
	n := 0
	for _, m := range ms {
		if t.learn(m) {
			n++
		}
	}
	return n
}

// departed reports whether s is a member that died or left.
func departed(s State) bool { return s == StateDead || s == StateLeft }
