package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func newClusterCmd(a *app) *cobra.Command {
	return parentCmd("cluster", "Show the cluster's nodes and metadata groups; rebalance them; remove a node",
		`  malachi cluster status
  malachi cluster vnodes -o json
  malachi cluster rebalance --plan
  malachi cluster remove 3 --yes`,
		newClusterStatusCmd(a), newClusterVnodesCmd(a), newClusterRebalanceCmd(a), newClusterRemoveCmd(a))
}

// errSingleNode answers cluster commands sent to a node that runs alone.
func errSingleNode(server string) error {
	return &exitError{code: 1, err: fmt.Errorf("%s runs alone (started without --node-id): it is no cluster member, so there is no cluster to show or change", server)}
}

// clusterStatus asks the node for the cluster's status, refusing a single
// node with a clear message.
func clusterStatus(ctx context.Context, s *session) (client.ClusterStatus, error) {
	st, err := s.c.ClusterStatus(ctx)
	if err != nil {
		return st, err
	}
	if st.Node == 0 {
		return st, errSingleNode(s.set.Server)
	}
	return st, nil
}

func newClusterStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's health, nodes, metadata groups and repair",
		Long: `Show the cluster as the node at --server sees it. First its health: whether
every node is up with a disk that is ok and every segment has all its copies,
whole; then every node with its liveness (from gossip: alive, suspect,
leaving, left, dead, or unknown while gossip has not heard of it), its segment
disk (ok, full: it takes no new replicas, or failing), whether the control
plane has registered it, its addresses and attributes; then the metadata
groups (the root and each vnode) with their leader, voters, learners and the
index this node has applied; then this node's traffic with each other node on
the peer port since it started (frames are messages; writes are the batched
writes that carried them). Read the counters twice to get rates.

Then repair, each section only when it has something to show: the
under-replicated segments (active or sealed segments with fewer live copies
than their factor: a count per topic for the first 100 topics, and the first
100 segments; every section head gives the real total, "100 of 5,000
listed", when a node cuts its list), the copies this
node is filling from a healthy peer with the bytes written so far, the copies
found damaged or missing (never served; replaced once a healthy copy is
found), the segments the heal cannot fix yet and why, and the scrub: the
sealed copies this node re-verifies each --scrub-interval, and whether
--scrub-rate is too low to verify them all in one. A node older than this
reports no repair: the under-replicated segments are then worked out here
from the topics' descriptions (the first 50 of them, in at most the first
1000 topics). Administrators only.`,
		Example: `  malachi cluster status
  malachi --server 127.0.0.1:4050 cluster status -o json | jq '.groups[] | {name, leader}'
  malachi cluster status -o json | jq '.repair.damaged'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
				st, err := clusterStatus(ctx, s)
				if err != nil {
					return err
				}
				var u underReplicatedJSON
				if st.Repair != nil {
					u = repairUnderReplicated(st.Repair)
				} else if u, err = underReplicated(ctx, s, st); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(clusterStatusDoc{ClusterStatus: st, underReplicatedJSON: u})
				}
				if err := printClusterStatus(s.out, &st, u); err != nil {
					return err
				}
				if err := printUnderReplicated(s.out, u); err != nil {
					return err
				}
				return printRepair(s.out, st.Repair)
			})
		},
	}
}

func printClusterStatus(p *printer, st *client.ClusterStatus, u underReplicatedJSON) error {
	if err := p.fields(append([][2]string{
		{"Node", strconv.FormatUint(st.Node, 10) + " (answering)"},
		{"Vnodes", strconv.Itoa(st.Vnodes)},
	}, healthFields(st, u)...)); err != nil {
		return err
	}
	p.textf("\nNodes")
	rows := make([][]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		rows = append(rows, []string{
			strconv.FormatUint(n.ID, 10), n.Liveness, diskText(n), yesNo(n.Registered), dash(n.ClientAddr), dash(n.HTTPAddr),
			dash(n.PeerAddr), dash(n.GossipAddr), attrText(n.Attrs),
		})
	}
	if err := p.table([]string{"ID", "LIVENESS", "DISK", "REGISTERED", "CLIENT", "HTTP", "PEER", "GOSSIP", "ATTRIBUTES"}, rows); err != nil {
		return err
	}
	p.textf("\nGroups")
	rows = rows[:0]
	for _, g := range st.Groups {
		rows = append(rows, []string{g.Name, leaderText(g.Leader), joinUints(g.Voters), joinUints(g.Learners), itoa(g.Applied)})
	}
	if err := p.table([]string{"GROUP", "LEADER", "VOTERS", "LEARNERS", "APPLIED"}, rows); err != nil {
		return err
	}
	p.textf("\nPeer traffic since this node started")
	rows = rows[:0]
	for _, pe := range st.Peers {
		rows = append(rows, []string{
			itoa(pe.Node), yesNo(pe.Connected), itoa(pe.FramesSent), itoa(pe.BytesSent), itoa(pe.Writes),
			itoa(pe.FramesReceived), itoa(pe.BytesReceived),
		})
	}
	return p.table([]string{"PEER", "CONNECTED", "FRAMES SENT", "BYTES SENT", "WRITES", "FRAMES RECEIVED", "BYTES RECEIVED"}, rows)
}

func newClusterVnodesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "vnodes",
		Short: "Show each metadata group: leader, term, voters, learners, commit and applied index",
		Long: `Show each metadata group (the root group of users, ACLs and the node registry,
and the vnodes that hold the topics) as the replica on the node at --server
sees it: the leader, the term, that replica's role, the voters and learners,
the committed voters (PLACED: the voters move towards them; nodes joining and
leaving, and 'malachi cluster rebalance --apply', change them), and the commit
and applied indexes. Administrators only.`,
		Example: `  malachi cluster vnodes
  malachi cluster vnodes -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
				st, err := clusterStatus(ctx, s)
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(st.Groups)
				}
				rows := make([][]string, 0, len(st.Groups))
				for _, g := range st.Groups {
					rows = append(rows, []string{
						g.Name, leaderText(g.Leader), itoa(g.Term), roleText(g.State), joinUints(g.Voters), joinUints(g.Learners),
						joinUints(g.Placed), itoa(g.Commit), itoa(g.Applied),
					})
				}
				return s.out.table([]string{"GROUP", "LEADER", "TERM", "THIS REPLICA", "VOTERS", "LEARNERS", "PLACED", "COMMIT", "APPLIED"}, rows)
			})
		},
	}
}

func newClusterRemoveCmd(a *app) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "remove NODE",
		Short: "Take a node out of the cluster for good",
		Long: `Take node NODE (its id) out of the cluster for good: the control plane moves
its metadata replicas to the other nodes (new ones first, then the old ones
go) and forgets it. Send it to another node than the one removed: a node
cannot remove itself. Its segment copies count as dead at once (no
--dead-after wait): every sealed segment it held is copied back to its
factor from the other copies, and a segment that lived only on the removed
node is recorded lost, its records skipped by readers. Its data directory
must not be started again (the cluster refuses it); a replacement gets a
new --node-id.

On a terminal it asks first; --yes skips the question. A removal that takes
longer than --timeout goes on in the cluster; asking again is safe.
Administrators only.`,
		Example: `  malachi cluster remove 3
  malachi --server 127.0.0.1:4040 cluster remove 3 --yes`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return usageErr("NODE is a node id, a positive integer such as 3 ('malachi cluster status' lists them), not %q", args[0])
			}
			if !yes && isTerminal(os.Stdin) && !confirm(cmd, fmt.Sprintf("Remove node %d from the cluster for good?", id)) {
				return &exitError{code: 1, err: errors.New("not removed (answer y, or pass --yes)")}
			}
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
				return removeNode(ctx, s, id)
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func removeNode(ctx context.Context, s *session, id uint64) error {
	err := s.c.RemoveNode(ctx, id)
	switch {
	case errors.Is(err, client.ErrNotEnabled):
		return errSingleNode(s.set.Server)
	case errors.Is(err, client.ErrInvalidCommand):
		return &exitError{code: 1, err: fmt.Errorf("%s refused: %v (a node cannot remove itself: if node %d is the one at %s, send the removal to another node with --server)", s.set.Server, err, id, s.set.Server)}
	case err != nil:
		return err
	}
	if s.out.json {
		return s.out.doc(map[string]any{"node": id, "removed": true})
	}
	s.out.textf("removed node %d from the cluster", id)
	return nil
}

// roleText is a raft role for people: "StateLeader" is "leader".
func roleText(state string) string {
	return strings.ToLower(strings.TrimPrefix(state, "State"))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func leaderText(id uint64) string {
	if id == 0 {
		return "none"
	}
	return strconv.FormatUint(id, 10)
}

// attrText renders attributes as "rack=a zone=z1", sorted by key.
func attrText(attrs map[string]string) string {
	if len(attrs) == 0 {
		return "-"
	}
	pairs := make([]string, 0, len(attrs))
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		pairs = append(pairs, k+"="+attrs[k])
	}
	return strings.Join(pairs, " ")
}

func newClusterRebalanceCmd(a *app) *cobra.Command {
	var planOnly, apply bool
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Show, or apply, the plan that balances the metadata groups' voters and leaders",
		Long: `Show the rebalance plan the leader of the root group stages (--plan, the
default): for every metadata group, the voters placement picks over the live
nodes and the moves to get there (voters to add, then voters to remove), and a
leader for every group so that each live node leads about as many groups as
the others. A group whose moves would leave its voters without a live quorum
stays as it is, and the plan says why.

Nodes joining a cluster whose groups have all their voters become learners
everywhere: they take voter slots only when a rebalance is applied (or by
itself with serve --auto-rebalance).

--apply commits the plan; the groups' leaders then carry it out in the
background, adding before removing and checking each step for a live quorum,
and hand leadership to the chosen voters. Watch it with 'malachi cluster
vnodes'. Administrators only.`,
		Example: `  malachi cluster rebalance --plan
  malachi cluster rebalance --apply
  malachi cluster rebalance -o json | jq '.groups[] | select(.add) | {name, add, remove}'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if planOnly && apply {
				return usageErr("--plan shows the plan and --apply commits it: pass one")
			}
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
				p, err := s.c.Rebalance(ctx, apply)
				if errors.Is(err, client.ErrNotEnabled) {
					return errSingleNode(s.set.Server)
				}
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(p)
				}
				return printRebalancePlan(s.out, &p)
			})
		},
	}
	cmd.Flags().BoolVar(&planOnly, "plan", false, "show the plan without changing anything (the default)")
	cmd.Flags().BoolVar(&apply, "apply", false, "commit the plan; the groups' leaders carry it out")
	return cmd
}

func printRebalancePlan(p *printer, plan *client.RebalancePlan) error {
	state := fmt.Sprintf("%d moves, not applied (run with --apply to commit it)", plan.Moves())
	switch {
	case plan.Moves() == 0:
		state = "nothing to move: the voters and leaders are balanced"
	case plan.Applied:
		state = fmt.Sprintf("%d moves, applied: the groups' leaders are carrying it out ('malachi cluster vnodes' shows them)", plan.Moves())
	}
	if err := p.fields([][2]string{{"Plan", state}}); err != nil {
		return err
	}
	p.textf("\nNodes")
	rows := make([][]string, 0, len(plan.Nodes))
	for _, n := range plan.Nodes {
		rows = append(rows, []string{itoa(n.ID), yesNo(n.Live), arrow(n.Voter, n.VoterAfter), arrow(n.Leads, n.LeadsAfter)})
	}
	if err := p.table([]string{"ID", "LIVE", "VOTER IN", "LEADS"}, rows); err != nil {
		return err
	}
	p.textf("\nGroups")
	rows = rows[:0]
	for _, g := range plan.Groups {
		leader := leaderText(g.Leader)
		if g.NewLeader != g.Leader {
			leader += " → " + leaderText(g.NewLeader)
		}
		rows = append(rows, []string{g.Name, joinUints(g.Voters), joinUints(g.Target), joinUints(g.Add), joinUints(g.Remove), leader, dash(g.Held)})
	}
	return p.table([]string{"GROUP", "VOTERS", "TARGET", "ADD", "REMOVE", "LEADER", "HELD"}, rows)
}

// arrow is "3" when a count stays, "3 → 2" when it changes.
func arrow(before, after int) string {
	if before == after {
		return strconv.Itoa(before)
	}
	return strconv.Itoa(before) + " → " + strconv.Itoa(after)
}

// Bounds of the under-replication scan of `cluster status`: the topics
// described (one request each) and the segments listed.
const (
	maxUnderRepTopics = 1000
	maxUnderRepListed = 50
)

type underReplicatedJSON struct {
	UnderReplicated         []client.UnderReplicatedTopic   `json:"under_replicated"`
	UnderReplicatedSegments []client.UnderReplicatedSegment `json:"under_replicated_segments"`
	// Total counts the under-replicated segments, listed or not: the
	// node's own count, or the scan's.
	Total int `json:"under_replicated_total"`
	// TopicsScanned is how many topics were described; fewer than the
	// node has when TopicsTruncated. Zero when the node reported its
	// own view (ClusterStatus.Repair), which covers every topic.
	TopicsScanned   int  `json:"topics_scanned,omitempty"`
	TopicsTruncated bool `json:"topics_truncated,omitempty"`
}

// clusterStatusDoc is `cluster status -o json`: the node's answer, with
// the under-replicated segments beside it.
type clusterStatusDoc struct {
	client.ClusterStatus
	underReplicatedJSON
}

// underReplicated describes the node's topics, at most maxUnderRepTopics,
// and finds their segments with replicas st does not see live. A topic
// deleted between the list and its description is skipped.
func underReplicated(ctx context.Context, s *session, st client.ClusterStatus) (underReplicatedJSON, error) {
	list, err := s.c.ListTopics(ctx)
	if err != nil {
		return underReplicatedJSON{}, err
	}
	out := underReplicatedJSON{TopicsTruncated: len(list) > maxUnderRepTopics}
	list = list[:min(len(list), maxUnderRepTopics)]
	ds := make([]client.TopicDescription, 0, len(list))
	for _, t := range list {
		d, err := s.c.DescribeTopic(ctx, t.Name)
		if errors.Is(err, client.ErrNoSuchTopic) {
			continue
		}
		if err != nil {
			return underReplicatedJSON{}, err
		}
		ds = append(ds, d)
	}
	out.TopicsScanned = len(ds)
	out.UnderReplicated, out.UnderReplicatedSegments = client.UnderReplicated(st, ds, maxUnderRepListed)
	out.UnderReplicated = nonNil(out.UnderReplicated)
	out.UnderReplicatedSegments = nonNil(out.UnderReplicatedSegments)
	for _, t := range out.UnderReplicated {
		out.Total += t.Segments
	}
	return out, nil
}

func printUnderReplicated(p *printer, u underReplicatedJSON) error {
	total := u.Total
	head := "Under-replicated segments: none"
	if total > 0 {
		head = "Under-replicated segments: " + thousands(total)
	}
	if u.TopicsTruncated {
		head += fmt.Sprintf(" (in the first %d topics only)", u.TopicsScanned)
	}
	p.textf("\n%s", head)
	if total == 0 {
		return nil
	}
	rows := make([][]string, 0, len(u.UnderReplicated))
	for _, t := range u.UnderReplicated {
		rows = append(rows, []string{t.Topic, itoa(t.Segments)})
	}
	if listed := topicsTotal(u.UnderReplicated); listed < total {
		p.textf("The first %d topics, with %s of them:", len(u.UnderReplicated), ofTotal(listed, total))
	}
	if err := p.table([]string{"TOPIC", "SEGMENTS"}, rows); err != nil {
		return err
	}
	if total > len(u.UnderReplicatedSegments) {
		p.textf("\nThe first %s:", ofTotal(len(u.UnderReplicatedSegments), total))
	}
	rows = rows[:0]
	for _, sg := range u.UnderReplicatedSegments {
		want := sg.Factor
		if want == 0 {
			want = len(sg.Replicas)
		}
		rows = append(rows, []string{
			itoa(sg.Segment), sg.Topic, itoa(sg.Range), state(sg.Active), strings.Join(sg.Replicas, ","),
			fmt.Sprintf("%d of %d", sg.Live, want),
		})
	}
	return p.table([]string{"SEGMENT", "TOPIC", "RANGE", "STATE", "REPLICAS", "LIVE"}, rows)
}
