package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxNodes bounds the live nodes a request may list, so that one placement
// costs at most O(MaxNodes × factor).
const MaxNodes = 4096

var (
	// ErrNoNodes is returned when no live node can take a replica.
	ErrNoNodes = errors.New("placement: no live nodes")
	// ErrInvalidRequest is returned for a malformed request: duplicate or
	// too many nodes, a negative bound, min_domains without spread_by.
	ErrInvalidRequest = errors.New("placement: invalid request")
	// ErrInsufficientDomains is returned in hard mode when the replica set
	// cannot cover MinDomains domains; the error text says why.
	ErrInsufficientDomains = errors.New("placement: insufficient domains")
)

// Mode says what to do when MinDomains cannot be met.
type Mode uint8

const (
	// Soft places anyway and reports the shortfall in Placement.Violation.
	Soft Mode = iota
	// Hard refuses with ErrInsufficientDomains.
	Hard
)

func (m Mode) String() string {
	if m == Hard {
		return "hard"
	}
	return "soft"
}

// Constraints shape a segment's replica set beyond HRW rank.
type Constraints struct {
	// SpreadBy names the attribute whose values are failure domains
	// ("rack", "zone"); empty means no spreading.
	SpreadBy string
	// MinDomains is the fewest domains the set must cover; 0 means no
	// minimum. It needs SpreadBy.
	MinDomains int
	Mode       Mode
	// MaxSkew, when positive, avoids a node whose load is MaxSkew or more
	// above the least loaded live node while another node is within that
	// cap. 0 turns balancing off.
	MaxSkew int
}

// Load is how much each node already holds; a missing node holds nothing.
type Load struct {
	Replicas  map[uint64]int
	Primaries map[uint64]int
}

// Request asks for the replica set of one segment.
type Request struct {
	Topic   string
	Range   uint64
	Segment uint64
	// Nodes are the live nodes that may take a replica.
	Nodes []Node
	// Factor is the replication factor: DefaultFactor when <= 0, clamped to
	// the number of live nodes.
	Factor int
	Constraints
	Load Load
}

// Violation reports a soft placement that missed MinDomains.
type Violation struct {
	Need, Got int
	Reason    string
}

// Placement is a segment's replica set.
type Placement struct {
	// Replicas are node ids, the primary first.
	Replicas []uint64
	// Domains is how many distinct SpreadBy values the replicas cover (0
	// without SpreadBy).
	Domains int
	// Violation is set when a soft placement covers fewer than MinDomains.
	Violation *Violation
}

// PlaceSegment chooses a new segment's replica set: HRW over req.Nodes
// keyed by (topic, range, segment), shaped by req.Constraints (see the
// package documentation for their precedence). Its first replica is the
// primary.
func PlaceSegment(req Request) (Placement, error) {
	return Replace(nil, nil, req)
}

// Replace re-places a segment whose replica set is current after the nodes
// in dead are gone; dead nodes take no replica even if req.Nodes lists
// them. Members of current that are not dead and are among req.Nodes are
// kept, in their order (a surviving primary stays primary);
// new members are added under the same rules as PlaceSegment until the set
// has the factor, never removing a survivor, so a set larger than the
// factor stays as large. When no member survives, the primary is chosen as
// in PlaceSegment; otherwise the first survivor leads. With an empty
// current it is PlaceSegment.
func Replace(current, dead []uint64, req Request) (Placement, error) {
	if err := req.validate(); err != nil {
		return Placement{}, err
	}
	req.Nodes = slices.DeleteFunc(slices.Clone(req.Nodes), func(n Node) bool { return slices.Contains(dead, n.ID) })
	if len(req.Nodes) == 0 {
		return Placement{}, ErrNoNodes
	}
	factor := clampFactor(req.Factor, len(req.Nodes))
	byID := make(map[uint64]Node, len(req.Nodes))
	for _, n := range req.Nodes {
		byID[n.ID] = n
	}
	var kept []Node
	for _, id := range current {
		if n, live := byID[id]; live && !containsID(kept, id) {
			kept = append(kept, n)
		}
	}
	candidates := req.order(rank(segmentKey(req.Topic, req.Range, req.Segment), req.Nodes), kept)
	picked := pickSpread(kept, candidates, factor, req.SpreadBy)
	if len(kept) == 0 {
		picked = req.choosePrimary(picked)
	}
	return req.finish(picked, factor)
}

func containsID(nodes []Node, id uint64) bool {
	return slices.ContainsFunc(nodes, func(n Node) bool { return n.ID == id })
}

func (req Request) validate() error {
	switch {
	case len(req.Nodes) == 0:
		return ErrNoNodes
	case len(req.Nodes) > MaxNodes:
		return fmt.Errorf("%w: %d nodes, at most %d", ErrInvalidRequest, len(req.Nodes), MaxNodes)
	case req.MinDomains < 0 || req.MaxSkew < 0:
		return fmt.Errorf("%w: min_domains %d and max_skew %d must not be negative", ErrInvalidRequest, req.MinDomains, req.MaxSkew)
	case req.MinDomains > 0 && req.SpreadBy == "":
		return fmt.Errorf("%w: min_domains %d needs spread_by", ErrInvalidRequest, req.MinDomains)
	case req.Mode != Soft && req.Mode != Hard:
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidRequest, req.Mode)
	}
	seen := make(map[uint64]bool, len(req.Nodes))
	for _, n := range req.Nodes {
		if seen[n.ID] {
			return fmt.Errorf("%w: node %d listed twice", ErrInvalidRequest, n.ID)
		}
		seen[n.ID] = true
	}
	return nil
}

// order turns the HRW ranking into the candidate order, leaving out the
// nodes already kept: with MaxSkew, nodes within the cap come first in HRW
// order, then the others from the least loaded up.
func (req Request) order(ranking []ranked, kept []Node) []Node {
	floor := minLoad(req.Nodes, req.Load.Replicas)
	var within, over []ranked
	for _, r := range ranking {
		switch {
		case containsID(kept, r.node.ID):
		case req.MaxSkew == 0 || req.Load.Replicas[r.node.ID] < floor+req.MaxSkew:
			within = append(within, r)
		default:
			over = append(over, r)
		}
	}
	// Stable: equal loads keep their HRW order.
	slices.SortStableFunc(over, func(a, b ranked) int {
		return cmp.Compare(req.Load.Replicas[a.node.ID], req.Load.Replicas[b.node.ID])
	})
	out := make([]Node, 0, len(within)+len(over))
	for _, r := range append(within, over...) {
		out = append(out, r.node)
	}
	return out
}

func minLoad(nodes []Node, load map[uint64]int) int {
	low := 0
	for i, n := range nodes {
		if l := load[n.ID]; i == 0 || l < low {
			low = l
		}
	}
	return low
}

// pickSpread extends kept from candidates (in preference order) to factor
// nodes, round-robin across the domains of attribute spreadBy: pass k takes
// the best remaining candidate of each domain that holds k picks so far.
// Without spreadBy every node is in one domain and the passes take the
// candidates in order.
func pickSpread(kept, candidates []Node, factor int, spreadBy string) []Node {
	picked := slices.Clone(kept)
	used := make(map[string]int)
	for _, n := range kept {
		used[n.Attributes[spreadBy]]++
	}
	taken := make([]bool, len(candidates))
	for pass := 0; len(picked) < factor; pass++ {
		for i, n := range candidates {
			d := n.Attributes[spreadBy]
			if taken[i] || used[d] != pass || len(picked) == factor {
				continue
			}
			taken[i] = true
			used[d]++
			picked = append(picked, n)
		}
	}
	return picked
}

// choosePrimary moves to the front the first picked node whose primary
// count is within MaxSkew of the least loaded live node, or else the one
// with the fewest primaries; the others keep their order.
func (req Request) choosePrimary(picked []Node) []Node {
	if req.MaxSkew == 0 || len(picked) < 2 {
		return picked
	}
	load := req.Load.Primaries
	floor := minLoad(req.Nodes, load)
	best := 0
	for i, n := range picked {
		if load[n.ID] < floor+req.MaxSkew {
			best = i
			break
		}
		if load[n.ID] < load[picked[best].ID] {
			best = i
		}
	}
	out := append([]Node{picked[best]}, picked[:best]...)
	return append(out, picked[best+1:]...)
}

// finish counts domains and applies MinDomains.
func (req Request) finish(picked []Node, factor int) (Placement, error) {
	p := Placement{Replicas: make([]uint64, len(picked))}
	domains := make(map[string]bool)
	for i, n := range picked {
		p.Replicas[i] = n.ID
		domains[n.Attributes[req.SpreadBy]] = true
	}
	if req.SpreadBy != "" {
		p.Domains = len(domains)
	}
	if p.Domains >= req.MinDomains {
		return p, nil
	}
	reason := req.shortfall(p.Domains, factor)
	if req.Mode == Hard {
		return Placement{}, fmt.Errorf("%w: %s", ErrInsufficientDomains, reason)
	}
	p.Violation = &Violation{Need: req.MinDomains, Got: p.Domains, Reason: reason}
	return p, nil
}

// shortfall explains why only got domains were covered.
func (req Request) shortfall(got, factor int) string {
	live := make(map[string]bool)
	for _, n := range req.Nodes {
		live[n.Attributes[req.SpreadBy]] = true
	}
	names := make([]string, 0, len(live))
	for d := range live {
		names = append(names, fmt.Sprintf("%q", d))
	}
	slices.Sort(names)
	why := fmt.Sprintf("the %d live nodes span %d (%s)", len(req.Nodes), len(live), strings.Join(names, ", "))
	if factor < req.MinDomains && factor < len(live) {
		why = fmt.Sprintf("the replication factor is %d", factor)
	}
	return fmt.Sprintf("min_domains %d by %q, got %d: %s", req.MinDomains, req.SpreadBy, got, why)
}
