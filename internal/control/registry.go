package control

import (
	"cmp"
	"errors"
	"maps"
	"slices"
)

// Registry is the cluster's membership as the root group agreed it: the
// nodes with their addresses and attributes, the ring, and the replica set
// (voters) placement picks for each group. It changes only through root
// group commands, so every node reads the same registry at the same index.
// Gossip (internal/membership) says who is alive; the registry says who is
// a member, which is what replica sets are built from.
type Registry struct {
	Vnodes     int          `json:"vnodes"`      // ring size
	Factor     int          `json:"factor"`      // voters per vnode (clamped to the nodes)
	RootVoters int          `json:"root_voters"` // voters of the root group (clamped)
	Nodes      []NodeRecord `json:"nodes"`       // sorted by id
	// Voters is the committed voter set of each group, by group id; every
	// other node is a learner there. It changes by growth and removal
	// (settle) and by an applied rebalance, never by a node joining a
	// group that already has its factor (see rebalance_plan.go).
	Voters map[uint64][]uint64 `json:"voters"`
	// Leaders names, by group id, the voter an applied rebalance chose to
	// lead the group; the group's leader hands leadership to it when it is
	// live and caught up. A group with no entry keeps whatever leader
	// raft elected.
	Leaders map[uint64]uint64 `json:"leaders,omitempty"`
	// Removed lists the ids removed from the cluster, oldest first, at
	// most maxRemoved (the oldest is forgotten beyond). A removed id is
	// never registered again: its replicas may come back with their old
	// logs, and raft must never see a replica under an id its groups
	// removed. A removed machine rejoins with a wiped data directory and
	// a new node id.
	Removed []uint64 `json:"removed,omitempty"`
}

// NodeRecord is one registered node.
type NodeRecord struct {
	ID    uint64            `json:"id"`
	Addr  string            `json:"addr"` // peer address
	Attrs map[string]string `json:"attrs,omitempty"`
	// Incarnation names the data directory the node registered with
	// (Config.Incarnation). A registration of a registered id with
	// another incarnation is refused: the id's replicas lost their state,
	// and raft must never see such a replica under its old id.
	Incarnation string `json:"incarnation,omitempty"`
}

// Bounds of the registry, checked by its commands.
const (
	MaxNodes       = 1024
	maxAddrLen     = 255
	maxAttrs       = 32
	maxAttrLen     = 255
	defaultRootMax = 5
	maxRemoved     = 4096
)

// Registry command kinds.
const (
	regRegister  = "register_node"
	regRemove    = "remove_node"
	regRebalance = "rebalance"
)

// regCommand changes the registry; it travels in a root group entry.
type regCommand struct {
	Kind string     `json:"k"`
	Node NodeRecord `json:"node"`
	// Rebalance is the committed plan of a rebalance command.
	Rebalance *rebalanceCommand `json:"rebalance,omitempty"`
}

// Registry refusals (the text travels back to the proposer).
var (
	errBadNode      = errors.New("control: bad node record (id 0, or address or attributes out of bounds)")
	errTooManyNodes = errors.New("control: cluster has MaxNodes nodes")
	errUnknownNode  = errors.New("control: node is not registered")
	errLastNode     = errors.New("control: cannot remove the last node")
	errIncarnation  = errors.New("control: this node id is registered with another data directory (it lost its state): remove it from the cluster (malachi cluster remove) and start it under a new id")
	errRemovedNode  = errors.New("control: this node id was removed from the cluster and is never registered again: wipe the node's data directory and start it under a new node id")
	errUnknownReg   = errors.New("control: unknown registry command")
)

func newRegistry(vnodes, factor int, self NodeRecord) *Registry {
	r := &Registry{Vnodes: vnodes, Factor: factor, RootVoters: defaultRootMax, Nodes: []NodeRecord{self}}
	r.place()
	return r
}

// apply runs one registry command. Deterministic: it reads nothing but
// the registry and the command; a refusal changes nothing.
func (r *Registry) apply(c *regCommand) error {
	switch c.Kind {
	case regRegister:
		if !validNode(c.Node) {
			return errBadNode
		}
		if slices.Contains(r.Removed, c.Node.ID) {
			return errRemovedNode
		}
		i, found := r.find(c.Node.ID)
		if found && r.Nodes[i].Incarnation != "" && r.Nodes[i].Incarnation != c.Node.Incarnation {
			return errIncarnation
		}
		if found {
			r.Nodes[i] = c.Node.clone()
		} else {
			if len(r.Nodes) >= MaxNodes {
				return errTooManyNodes
			}
			r.Nodes = slices.Insert(r.Nodes, i, c.Node.clone())
		}
	case regRemove:
		i, found := r.find(c.Node.ID)
		switch {
		case !found:
			return errUnknownNode
		case len(r.Nodes) == 1:
			return errLastNode
		}
		r.Nodes = slices.Delete(r.Nodes, i, i+1)
		if len(r.Removed) >= maxRemoved {
			r.Removed = slices.Delete(r.Removed, 0, len(r.Removed)-maxRemoved+1)
		}
		r.Removed = append(r.Removed, c.Node.ID)
	case regRebalance:
		if err := r.rebalance(c.Rebalance); err != nil {
			return err
		}
	default:
		return errUnknownReg
	}
	r.place()
	return nil
}

func (r *Registry) find(id uint64) (int, bool) {
	return slices.BinarySearchFunc(r.Nodes, id, func(n NodeRecord, id uint64) int { return cmp.Compare(n.ID, id) })
}

// place brings every group's committed voters to its factor over the
// registered nodes (settle); an applied rebalance moves them further.
func (r *Registry) place() { r.settle() }

func sorted(ids []uint64) []uint64 {
	slices.Sort(ids)
	return ids
}

// Has reports whether node is registered.
func (r *Registry) Has(node uint64) bool {
	_, ok := r.find(node)
	return ok
}

// Node returns a registered node.
func (r *Registry) Node(id uint64) (NodeRecord, bool) {
	i, ok := r.find(id)
	if !ok {
		return NodeRecord{}, false
	}
	return r.Nodes[i].clone(), true
}

// NodeIDs lists the registered nodes, ascending.
func (r *Registry) NodeIDs() []uint64 {
	ids := make([]uint64, len(r.Nodes))
	for i, n := range r.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// Clone returns a deep copy.
func (r *Registry) Clone() *Registry {
	c := *r
	c.Nodes = make([]NodeRecord, len(r.Nodes))
	for i, n := range r.Nodes {
		c.Nodes[i] = n.clone()
	}
	c.Voters = make(map[uint64][]uint64, len(r.Voters))
	for g, vs := range r.Voters {
		c.Voters[g] = slices.Clone(vs)
	}
	c.Leaders = maps.Clone(r.Leaders)
	c.Removed = slices.Clone(r.Removed)
	return &c
}

func (n NodeRecord) clone() NodeRecord {
	n.Attrs = maps.Clone(n.Attrs)
	return n
}

func validNode(n NodeRecord) bool {
	if n.ID == 0 || n.Addr == "" || len(n.Addr) > maxAddrLen || len(n.Attrs) > maxAttrs || len(n.Incarnation) > maxAttrLen {
		return false
	}
	for k, v := range n.Attrs {
		if k == "" || len(k) > maxAttrLen || len(v) > maxAttrLen {
			return false
		}
	}
	return true
}

// validate checks a registry read from a snapshot.
func (r *Registry) validate() error {
	if r.Vnodes < 1 || r.Vnodes > MaxVnodes || r.Factor < 1 || r.RootVoters < 1 || len(r.Nodes) == 0 {
		return errors.New("control: registry: bad ring, factor or empty node list")
	}
	for i, n := range r.Nodes {
		if !validNode(n) || i > 0 && r.Nodes[i-1].ID >= n.ID {
			return errors.New("control: registry: bad or unsorted node record")
		}
	}
	if len(r.Removed) > maxRemoved {
		return errors.New("control: registry: too many removed ids")
	}
	for _, id := range r.Removed {
		if id == 0 || r.Has(id) {
			return errors.New("control: registry: a removed id is 0 or registered")
		}
	}
	return nil
}
