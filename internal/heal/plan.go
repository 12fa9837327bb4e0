package heal

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/internal/placement"
)

// MaxFactor bounds a segment's replication factor, as the metadata
// bounds a replica list.
const MaxFactor = 16

// Defaults for Config.
const (
	DefaultMaxTasksPerNode = 2
	DefaultMaxTasks        = 64
)

// Config shapes planning.
type Config struct {
	// DeadAfterMs is the grace after which a node that went down is
	// dead: its copies stop counting and are healed around.
	DeadAfterMs int64
	// MaxTasksPerNode bounds the heals a node takes part in at once, as
	// source or target; MaxTasks bounds them in the whole cluster.
	MaxTasksPerNode int
	MaxTasks        int
	// Constraints are the placement rules new replicas honour.
	Constraints placement.Constraints
}

func (c *Config) withDefaults() error {
	if c.MaxTasksPerNode == 0 {
		c.MaxTasksPerNode = DefaultMaxTasksPerNode
	}
	if c.MaxTasks == 0 {
		c.MaxTasks = DefaultMaxTasks
	}
	if c.DeadAfterMs < 0 || c.MaxTasksPerNode < 0 || c.MaxTasks < 0 {
		return fmt.Errorf("heal: dead-after %d ms, %d tasks per node and %d in all must not be negative",
			c.DeadAfterMs, c.MaxTasksPerNode, c.MaxTasks)
	}
	return nil
}

// Node is a live node as the planner sees it.
type Node struct {
	ID         uint64
	Attributes map[string]string
	// Full and Failing mark a disk that is out of space or whose writes
	// fail: the node takes no new copy, but its copies still serve.
	Full, Failing bool
}

// Down is a node membership reports down, since SinceMs.
type Down struct {
	ID         uint64
	SinceMs    int64
	Attributes map[string]string
}

// Segment is a sealed segment as the planner sees it.
type Segment struct {
	Seal
	// Topic and Range, with Seal.Segment, are the placement key.
	Topic string
	Range uint64
	// Replicas is the recorded replica list, the primary first.
	Replicas []uint64
	// Factor is the replication factor to restore (DefaultFactor when
	// <= 0, at most MaxFactor).
	Factor int
	// Damaged lists holders whose copy a scrub found damaged or short;
	// Verified those whose copy a scrub or heal found whole, preferred as
	// sources.
	Damaged, Verified []uint64
}

// Input is what one planning pass sees.
type Input struct {
	Now      int64
	Segments []Segment
	Live     []Node
	Down     []Down
	// Removed lists the nodes the control plane records as removed from
	// the cluster by an operator. Removal is explicit and final, so their
	// copies are dead at once, with no grace; a node merely missing from
	// membership is not one of them (see classify).
	Removed []uint64
	// InFlight are the tasks not yet finished: their segments are not
	// planned again and their nodes' budgets are taken.
	InFlight []Assignment
	// Load is passed to placement for MaxSkew.
	Load placement.Load
}

// Assignment is a heal to start: copy segment Seal.Segment from Source
// to Targets, then record Replicas plus Targets, then drop Drop.
type Assignment struct {
	Seal     Seal
	Source   uint64
	Targets  []uint64
	Replicas []uint64
	// Drop lists the copies that leave the list once the targets are
	// recorded: those on dead nodes and the damaged ones. It is empty
	// unless the recorded list will hold the factor in healthy copies.
	Drop []uint64
	// Damaged lists the holders whose copy is damaged, so that their
	// files can be deleted once dropped (Task.Deletable).
	Damaged []uint64
	// Rebuild lists the targets that are damaged holders: when no other
	// node can take a copy, such a holder sets its damaged copy aside,
	// fills a fresh one, and leaves and rejoins the list so that its
	// damage mark clears (Task.Submit). They are never in Drop.
	Rebuild []uint64
}

// Problem says why a segment was not (fully) healed.
type Problem uint8

const (
	// Waiting: some copies are on nodes down less than the grace.
	Waiting Problem = iota + 1
	// NoHealthySource: only damaged copies remain; they are kept.
	NoHealthySource
	// Lost: no copy is on a live or recently down node. The broker
	// records such a segment lost (a deleted span readers skip) only
	// after it finds every holder removed or dead and unanswerable.
	Lost
	// NoTarget: no live node with a healthy disk can take a copy.
	NoTarget
	// ShortOfNodes: fewer new copies were placed than the factor needs.
	ShortOfNodes
	// DomainsRefused: placement refused in hard mode.
	DomainsRefused
	// DomainsViolated: placed anyway in soft mode, short of MinDomains.
	DomainsViolated
	// Busy: the source or a target is at MaxTasksPerNode.
	Busy
	// OverBudget: MaxTasks tasks are in flight.
	OverBudget
	// Unknown: the segment is short of healthy copies but for copies on
	// nodes membership does not know at all. They count, so nothing is
	// healed around them (a node that just joined may not be gossiped
	// yet), but should that last (a node died before every node that
	// now plans started), the segment stays short until membership
	// reports the node down or an operator removes it: it is reported
	// so that the wait is seen.
	Unknown
)

func (p Problem) String() string {
	names := [...]string{"", "waiting", "no healthy source", "lost", "no target", "short of nodes",
		"domains refused", "domains violated", "busy", "over budget", "unknown holder"}
	if int(p) < len(names) && p != 0 {
		return names[p]
	}
	return fmt.Sprintf("problem-%d", uint8(p))
}

// Report is a segment the plan could not fully heal, and why.
type Report struct {
	Segment uint64
	Problem Problem
	Detail  string
}

// Plan is one pass's answer, deterministic for the same Input.
type Plan struct {
	Tasks   []Assignment
	Reports []Report
}

// ErrInvalidInput refuses an input that lists a node twice.
var ErrInvalidInput = errors.New("heal: invalid input")

// PlanHeals answers the heals to start. Segments are taken most endangered
// first (fewest counted copies), then by id; see the package doc for the
// rules.
func PlanHeals(cfg Config, in Input) (Plan, error) {
	if err := cfg.withDefaults(); err != nil {
		return Plan{}, err
	}
	p, err := newPlanner(cfg, in)
	if err != nil {
		return Plan{}, err
	}
	for _, seg := range p.order(in.Segments) {
		p.segment(seg)
	}
	return p.plan, nil
}

// planner holds one pass's views of the nodes and the budgets used.
type planner struct {
	cfg     Config
	in      Input
	live    map[uint64]Node
	down    map[uint64]Down
	removed map[uint64]bool
	busy    map[uint64]int  // tasks per node, in flight and planned
	healing map[uint64]bool // segments with a task
	total   int
	plan    Plan
}

func newPlanner(cfg Config, in Input) (*planner, error) {
	p := &planner{cfg: cfg, in: in, live: make(map[uint64]Node), down: make(map[uint64]Down),
		removed: make(map[uint64]bool), busy: make(map[uint64]int), healing: make(map[uint64]bool)}
	for _, n := range in.Live {
		if _, dup := p.live[n.ID]; dup {
			return nil, fmt.Errorf("%w: node %d listed live twice", ErrInvalidInput, n.ID)
		}
		p.live[n.ID] = n
	}
	for _, d := range in.Down {
		if _, dup := p.live[d.ID]; dup {
			return nil, fmt.Errorf("%w: node %d listed live and down", ErrInvalidInput, d.ID)
		}
		p.down[d.ID] = d
	}
	for _, id := range in.Removed {
		if _, live := p.live[id]; live {
			return nil, fmt.Errorf("%w: node %d listed live and removed", ErrInvalidInput, id)
		}
		p.removed[id] = true // NB: it may be listed down too: gossip lags
	}
	for _, a := range in.InFlight {
		p.take(a)
	}
	return p, nil
}

// take counts a's budget.
func (p *planner) take(a Assignment) {
	p.healing[a.Seal.Segment] = true
	p.total++
	if len(a.Targets) == 0 {
		return // a drop copies nothing
	}
	p.busy[a.Source]++
	for _, t := range a.Targets {
		p.busy[t]++
	}
}

// holders sorts seg's replicas by what their copies are worth.
type holders struct {
	healthy []uint64 // live, not damaged: sources, and they count
	pending []uint64 // down within the grace, or unknown: they count
	unknown []uint64 // the pending ones membership does not know
	damaged []uint64 // live and damaged
	dead    []uint64 // down past the grace, or removed
}

func (p *planner) classify(seg Segment) holders {
	var h holders
	for _, id := range seg.Replicas {
		_, live := p.live[id]
		d, down := p.down[id]
		switch {
		case live && slices.Contains(seg.Damaged, id):
			h.damaged = append(h.damaged, id)
		case live:
			h.healthy = append(h.healthy, id)
		case p.removed[id]:
			h.dead = append(h.dead, id)
		case down && p.in.Now-d.SinceMs >= p.cfg.DeadAfterMs:
			h.dead = append(h.dead, id)
		default:
			// NB: a node membership does not know, and the control
			// plane does not record removed, is taken as down within
			// the grace: its copy counts and nothing is copied on the
			// strength of a doubt.
			h.pending = append(h.pending, id)
			if !down {
				h.unknown = append(h.unknown, id)
			}
		}
	}
	return h
}

func factorOf(seg Segment) int {
	if seg.Factor <= 0 {
		return placement.DefaultFactor
	}
	return min(seg.Factor, MaxFactor)
}

// order sorts segments by counted copies, then id.
func (p *planner) order(segs []Segment) []Segment {
	out := slices.Clone(segs)
	counted := make(map[uint64]int, len(out))
	for _, s := range out {
		h := p.classify(s)
		counted[s.Seal.Segment] = len(h.healthy) + len(h.pending)
	}
	slices.SortStableFunc(out, func(a, b Segment) int {
		if c := cmp.Compare(counted[a.Seal.Segment], counted[b.Seal.Segment]); c != 0 {
			return c
		}
		return cmp.Compare(a.Seal.Segment, b.Seal.Segment)
	})
	return out
}

func (p *planner) report(seg Segment, pr Problem, format string, args ...any) {
	p.plan.Reports = append(p.plan.Reports, Report{Segment: seg.Seal.Segment, Problem: pr, Detail: fmt.Sprintf(format, args...)})
}

// segment plans seg, if it needs anything.
func (p *planner) segment(seg Segment) {
	if p.healing[seg.Seal.Segment] {
		return
	}
	h := p.classify(seg)
	want := factorOf(seg)
	if len(h.unknown) > 0 && len(h.healthy) < want {
		p.report(seg, Unknown, "its copies on nodes %v count, though membership does not know them; they are healed around once membership reports them down past %d ms, or once they are removed",
			h.unknown, p.cfg.DeadAfterMs)
	}
	stale := append(slices.Clone(h.dead), h.damaged...)
	if len(h.healthy)+len(h.pending) >= want {
		if len(stale) > 0 && len(h.healthy) >= want {
			p.add(Assignment{Seal: seg.Seal, Replicas: slices.Clone(seg.Replicas), Drop: stale, Damaged: h.damaged}, seg)
		}
		return
	}
	if len(h.healthy) == 0 {
		p.noSource(seg, h)
		return
	}
	p.heal(seg, h, want, stale)
}

func (p *planner) noSource(seg Segment, h holders) {
	waiting := slices.DeleteFunc(slices.Clone(h.pending), func(id uint64) bool { return slices.Contains(h.unknown, id) })
	switch {
	case len(waiting) > 0:
		p.report(seg, Waiting, "its copies are on nodes %v, down less than %d ms", waiting, p.cfg.DeadAfterMs)
	case len(h.pending) > 0:
		// Only unknown nodes hold it: reported Unknown already.
	case len(h.damaged) > 0:
		p.report(seg, NoHealthySource, "only damaged copies remain, on %v; they are kept", h.damaged)
	default:
		p.report(seg, Lost, "every copy was on a dead or removed node: %v", h.dead)
	}
}

// heal places new copies for an under-replicated seg with a source.
func (p *planner) heal(seg Segment, h holders, want int, stale []uint64) {
	if p.total >= p.cfg.MaxTasks {
		p.report(seg, OverBudget, "%d heals in flight", p.total)
		return
	}
	source, ok := p.source(seg, h.healthy)
	if !ok {
		p.report(seg, Busy, "every healthy holder of %v is at %d heals", h.healthy, p.cfg.MaxTasksPerNode)
		return
	}
	targets, rebuild, ok := p.targets(seg, h, want)
	if !ok {
		return
	}
	for _, t := range targets {
		if p.busy[t] >= p.cfg.MaxTasksPerNode {
			p.report(seg, Busy, "target node %d is at %d heals", t, p.cfg.MaxTasksPerNode)
			return
		}
	}
	a := Assignment{Seal: seg.Seal, Source: source, Targets: targets, Replicas: slices.Clone(seg.Replicas),
		Damaged: h.damaged, Rebuild: rebuild}
	if len(h.healthy)+len(targets) >= want {
		// S3: they leave only after the targets are recorded; a holder
		// rebuilding its copy stays.
		a.Drop = slices.DeleteFunc(stale, func(id uint64) bool { return slices.Contains(rebuild, id) })
		if len(a.Drop) == 0 {
			a.Drop = nil
		}
	}
	p.add(a, seg)
}

func (p *planner) add(a Assignment, seg Segment) {
	if p.total >= p.cfg.MaxTasks {
		p.report(seg, OverBudget, "%d heals in flight", p.total)
		return
	}
	p.take(a)
	p.plan.Tasks = append(p.plan.Tasks, a)
}

// source picks the healthy holder to copy from: verified copies first,
// then the least busy, then replica order; never one at its budget.
func (p *planner) source(seg Segment, healthy []uint64) (uint64, bool) {
	cands := slices.Clone(healthy)
	rank := func(id uint64) int {
		if slices.Contains(seg.Verified, id) {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(cands, func(a, b uint64) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(p.busy[a], p.busy[b])
	})
	if p.busy[cands[0]] >= p.cfg.MaxTasksPerNode {
		return 0, false
	}
	return cands[0], true
}

// targets asks placement for the new members: the counted copies are
// kept (their domains count), and live nodes with a healthy disk that
// hold no copy of the segment are added. Only when they cannot make up
// the factor may damaged holders with a healthy disk be added too, each
// to rebuild its own copy: otherwise a segment every live node holds,
// some copies damaged, could never return to its factor.
func (p *planner) targets(seg Segment, h holders, want int) (targets, rebuild []uint64, ok bool) {
	kept := append(slices.Clone(h.healthy), h.pending...)
	var fresh, damaged []uint64
	for _, n := range p.in.Live {
		switch {
		case n.Full || n.Failing:
		case !slices.Contains(seg.Replicas, n.ID):
			fresh = append(fresh, n.ID)
		case slices.Contains(h.damaged, n.ID):
			damaged = append(damaged, n.ID)
		}
	}
	if len(fresh)+len(damaged) == 0 {
		p.report(seg, NoTarget, "no live node with a healthy disk lacks a whole copy")
		return nil, nil, false
	}
	var pl placement.Placement
	err := errNoCandidate
	if len(fresh) > 0 {
		pl, err = p.place(seg, kept, fresh, want)
	}
	if len(damaged) > 0 && (err != nil || len(pl.Replicas) < want) {
		base := kept
		if err == nil {
			base = pl.Replicas
		}
		// NB: when adding damaged holders fails where fresh nodes alone
		// placed some copies, those copies are still worth making.
		if more, merr := p.place(seg, base, append(fresh, damaged...), want); merr == nil || err != nil {
			pl, err = more, merr
		}
	}
	if errors.Is(err, placement.ErrInsufficientDomains) {
		p.report(seg, DomainsRefused, "%v", err)
		return nil, nil, false
	}
	if err != nil {
		p.report(seg, NoTarget, "%v", err)
		return nil, nil, false
	}
	for _, id := range pl.Replicas {
		if !slices.Contains(kept, id) {
			targets = append(targets, id)
		}
		if slices.Contains(damaged, id) {
			rebuild = append(rebuild, id)
		}
	}
	if pl.Violation != nil {
		p.report(seg, DomainsViolated, "%s", pl.Violation.Reason)
	}
	if got := len(kept) + len(targets); got < want {
		p.report(seg, ShortOfNodes, "%d of %d copies: only %d nodes can take one", got, want, len(fresh)+len(damaged))
	}
	if len(targets) == 0 {
		return nil, nil, false
	}
	return targets, rebuild, true
}

// errNoCandidate stands for a placement not tried: no node lacks a copy.
var errNoCandidate = errors.New("heal: no node lacks a copy")

// place asks placement.Replace to grow current to want from cands.
func (p *planner) place(seg Segment, current, cands []uint64, want int) (placement.Placement, error) {
	nodes := make([]placement.Node, 0, len(current)+len(cands))
	for _, id := range current {
		nodes = append(nodes, placement.Node{ID: id, Attributes: p.attributes(id)})
	}
	for _, id := range cands {
		if !slices.Contains(current, id) {
			nodes = append(nodes, placement.Node{ID: id, Attributes: p.attributes(id)})
		}
	}
	return placement.Replace(current, nil, placement.Request{
		Topic: seg.Topic, Range: seg.Range, Segment: seg.Seal.Segment,
		Nodes: nodes, Factor: want, Constraints: p.cfg.Constraints, Load: p.in.Load,
	})
}

func (p *planner) attributes(id uint64) map[string]string {
	if n, ok := p.live[id]; ok {
		return n.Attributes
	}
	return p.down[id].Attributes
}
