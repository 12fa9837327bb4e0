package membership

import (
	"fmt"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. memberlist calls most of them
// while holding its node lock, so they take only g.mu and the table's
// lock, never block, and never call back into memberlist.
type delegate struct{ g *Gossip }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
)

// NodeMeta returns the local metadata; encodeMeta kept it within
// MaxMetaSize, which is the limit memberlist passes.
func (d *delegate) NodeMeta(limit int) []byte {
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	if len(d.g.mu.meta) > limit {
		panic(fmt.Sprintf("membership: metadata of %d bytes over memberlist's limit %d", len(d.g.mu.meta), limit))
	}
	return append([]byte(nil), d.g.mu.meta...)
}

// The user-message hooks are unused: node-to-node traffic goes over the
// peer transport, not gossip.
func (d *delegate) NotifyMsg([]byte)                {}
func (d *delegate) GetBroadcasts(_, _ int) [][]byte { return nil }
func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.record(n, EventJoin) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.record(n, EventUpdate) }

// LocalState is this node's push-pull state: the members it knows died
// or left (departed.go).
func (d *delegate) LocalState(bool) []byte {
	return encodeDeparted(d.g.table.departedMembers())
}

// MergeRemoteState takes a peer's departed members this node has never
// heard of. memberlist has merged the peer's node states first, so a
// member that peer knows alive is already in the table.
func (d *delegate) MergeRemoteState(buf []byte, _ bool) {
	if len(buf) == 0 {
		return // a peer with no departures, or one that sends none
	}
	ms, skipped, err := decodeDeparted(buf, d.g.cfg.MaxMembers)
	if err != nil {
		d.g.log.Warn("a peer's departed members are unreadable; ignored", "err", err)
		return
	}
	if n := learnDeparted(d.g.table, ms); n > 0 || skipped > 0 {
		d.g.log.Info("members departed before this node heard of them", "learned", n, "skipped", skipped)
	}
}

// NotifyAlive filters every alive message before memberlist accepts it:
// the metadata must decode, name the id the node name carries, and find
// room in the member table.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	info, _, err := decodeMeta(n.Meta)
	if err == nil {
		if id, ok := idOfName(n.Name); !ok || id != info.ID {
			err = fmt.Errorf("%w: name %q does not match node id %d", ErrInvalidNode, n.Name, info.ID)
		}
	}
	if err == nil {
		err = d.g.table.admit(info.ID)
	}
	if err != nil {
		d.g.log.Warn("refusing member", "name", n.Name, "addr", n.Address(), "err", err)
	}
	return err
}

// NotifyLeave is memberlist's single callback for both a graceful leave
// and a failure (its Node.State is not set for either). The leaving mark
// in the metadata tells them apart.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	info, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		d.g.log.Warn("departed member has unreadable metadata", "name", n.Name, "err", err)
		return
	}
	kind, state := EventDead, StateDead
	if leaving {
		kind, state = EventLeave, StateLeft
	}
	d.g.table.set(kind, Member{NodeInfo: info, GossipAddr: n.Address(), State: state})
	d.g.log.Info("member departed", "kind", kind.String(), "member", info.ID, "addr", n.Address())
}

func (d *delegate) record(n *memberlist.Node, kind EventKind) {
	info, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		d.g.log.Warn("member has unreadable metadata", "name", n.Name, "err", err)
		return
	}
	state := StateAlive
	if leaving {
		state = StateLeaving
	}
	if !d.g.table.set(kind, Member{NodeInfo: info, GossipAddr: n.Address(), State: state}) {
		d.g.log.Warn("member table full", "member", info.ID, "limit", d.g.cfg.MaxMembers)
	}
}

// NotifyConflict: existing is the node memberlist knows under the name,
// other a second node claiming it from another address. memberlist keeps
// existing and ignores other.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	info, _, err := decodeMeta(other.Meta)
	if err != nil {
		info = NodeInfo{}
		if id, ok := idOfName(other.Name); ok {
			info.ID = id
		}
	}
	if existing.Name == d.g.name {
		d.g.mu.Lock()
		d.g.mu.conflicts++
		d.g.mu.claimant = other.Address()
		d.g.mu.Unlock()
	}
	d.g.log.Error("two nodes claim one node id", "id", info.ID, "known_at", existing.Address(), "claimant_at", other.Address())
	d.g.table.emit(Event{Kind: EventConflict, Member: Member{NodeInfo: info, GossipAddr: other.Address(), State: StateAlive}})
}
