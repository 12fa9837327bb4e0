package control

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
)

// TestThreeNodesCreateEverywhere: a node bootstraps, two join and become
// voters of every group (factor 3); topics created through every node are
// seen from every node, with ids that name their vnode and never collide;
// users and ACLs created through one node are seen on all; OnApplied
// reports changes made through other nodes.
func TestThreeNodesCreateEverywhere(t *testing.T) {
	c := threeNodes(t, 8)
	var names []string
	for i := range 12 {
		via := uint64(i%3 + 1)
		name := fmt.Sprintf("topic-%d", i)
		res := c.apply(via, createTopic(name))
		if res.Err != nil {
			t.Fatalf("create %s through node %d: %v", name, via, res.Err)
		}
		g, _ := c.node(via).GroupOfTopic(name)
		if GroupOfID(res.TopicID) != g {
			t.Errorf("topic %s: id %#x is of group %d, the ring says %d", name, res.TopicID, GroupOfID(res.TopicID), g)
		}
		for _, r := range res.RangeIDs {
			if GroupOfID(r) != g {
				t.Errorf("topic %s: range %#x is of group %d, want %d", name, r, GroupOfID(r), g)
			}
		}
		names = append(names, name)
	}
	c.waitFor("every topic on every node", 500, func() bool {
		for _, id := range c.ids() {
			for _, name := range names {
				if _, ok := c.topicOn(id, name); !ok {
					return false
				}
			}
		}
		return true
	})
	seen := map[uint64]string{}
	groups := map[uint64]bool{}
	for _, name := range names {
		tp, _ := c.topicOn(1, name)
		for _, id := range c.ids() {
			if other, _ := c.topicOn(id, name); other.ID != tp.ID || !slices.Equal(other.Ranges, tp.Ranges) {
				t.Errorf("topic %s differs on node %d: %+v vs %+v", name, id, other, tp)
			}
		}
		if prev, dup := seen[tp.ID]; dup {
			t.Errorf("topics %s and %s share id %#x", prev, name, tp.ID)
		}
		seen[tp.ID] = name
		groups[GroupOfID(tp.ID)] = true
	}
	if len(groups) < 2 {
		t.Fatalf("12 topics all landed in one vnode: the ring is not spreading them")
	}
	// ViewEach lists every topic exactly once.
	var listed []string
	if err := c.node(2).ViewEach(func(_ uint64, st *metadata.State) {
		for _, tp := range st.Topics() {
			listed = append(listed, tp.Name)
		}
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("ViewEach listed %v, want %v", listed, want)
	}
	// A duplicate create through another node is refused by the vnode.
	if res := c.apply(3, createTopic(names[0])); res.Err != metadata.ErrAlreadyExists {
		t.Errorf("second create of %s: %v, want already_exists", names[0], res.Err)
	}

	if res := c.apply(2, metadata.Command{Kind: metadata.KindCreateUser, User: "alice", PasswordHash: "h", Perms: []string{"produce"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := c.apply(3, metadata.Command{Kind: metadata.KindGrantACL, User: "alice", Operation: "produce", Pattern: "topic-*"}); res.Err != nil {
		t.Fatal(res.Err)
	}
	c.waitFor("alice and her ACL on every node", 500, func() bool {
		for _, id := range c.ids() {
			var ok bool
			_ = c.node(id).ViewRoot(func(st *metadata.State) {
				_, user := st.User("alice")
				ok = user && len(st.ACLs("alice")) == 1
			})
			if !ok {
				return false
			}
		}
		return true
	})
	var secret []byte
	_ = c.node(3).ViewRoot(func(st *metadata.State) { secret = st.ClusterSecret() })
	if string(secret) != string(testSecret) {
		t.Errorf("node 3 holds cluster secret %q", secret)
	}
	for _, id := range c.ids() {
		if !c.applied[id].has(metadata.KindCreateTopic, names[1]) {
			t.Errorf("node %d: OnApplied never reported create_topic %s", id, names[1])
		}
	}
}

// TestRoutingRefusesForeignIDs: a command naming an id that no vnode of the
// cluster allocated (a single-node id, shard 0) is answered without a
// proposal; a misrouted command is refused by the state machine.
func TestRoutingRefusesForeignIDs(t *testing.T) {
	c := newTestCluster(t, 4)
	n := c.start(1, true)
	c.waitFor("a leader everywhere", 500, func() bool {
		for _, g := range n.Status().Groups {
			if g.Leader == 0 {
				return false
			}
		}
		return true
	})
	res := c.apply(1, metadata.Command{Kind: metadata.KindOpenSegment, Range: 7})
	if res.Err != metadata.ErrNoSuchRange {
		t.Errorf("open_segment on a shard-0 range: %v", res.Err)
	}
	res = c.apply(1, metadata.Command{Kind: metadata.KindSealSegment, Segment: uint64(VnodeGroup(9)) << metadata.ShardShift})
	if res.Err != metadata.ErrNoSuchSegment {
		t.Errorf("seal of a segment of a vnode the ring lacks: %v", res.Err)
	}
	if res := c.apply(1, metadata.Command{Kind: "compact_everything"}); res.Err != metadata.ErrUnknownCommand {
		t.Errorf("unknown kind: %v", res.Err)
	}
	// Straight to the state machine: a topic command in the root, a
	// user command in a vnode.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := createTopic("misrouted")
	cmd.V = metadata.Version
	out, err := n.proposeEntry(ctx, RootGroup, entry{Meta: &cmd})
	if err != nil || out.Err != string(metadata.ErrInvalidCommand) {
		t.Errorf("create_topic in the root: %+v, %v", out, err)
	}
	user := metadata.Command{V: metadata.Version, Kind: metadata.KindCreateUser, User: "bob", PasswordHash: "h"}
	out, err = n.proposeEntry(ctx, VnodeGroup(0), entry{Meta: &user})
	if err != nil || out.Err != string(metadata.ErrInvalidCommand) {
		t.Errorf("create_user in a vnode: %+v, %v", out, err)
	}
}

// TestRetriedProposalAppliesOnce: the same entry (same request id)
// proposed twice, as a retry after an unknown outcome does, applies once
// and answers both times with the first result.
func TestRetriedProposalAppliesOnce(t *testing.T) {
	c := threeNodes(t, 2)
	n := c.node(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := createTopic("once")
	cmd.V = metadata.Version
	g, _ := n.GroupOfTopic("once")
	data, err := encodeEntry(entry{Origin: 2, Req: 42, Meta: &cmd})
	if err != nil {
		t.Fatal(err)
	}
	first, err := n.propose(ctx, g, data)
	if err != nil {
		t.Fatal(err)
	}
	second, err := n.propose(ctx, g, data)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) {
		t.Fatalf("retry answered %s, first %s", second, first)
	}
	o, _ := decodeOutcome(second)
	if o.Err != "" || o.TopicID == 0 {
		t.Fatalf("retry of a create answered %+v, want the create's own result", o)
	}
	// A new request for the same topic is a new command: already_exists.
	if res := c.apply(3, createTopic("once")); res.Err != metadata.ErrAlreadyExists {
		t.Fatalf("fresh create: %v", res.Err)
	}
}

// TestQuotaAcrossVnodes: an owner's topic limit holds across vnodes: the
// proposing node counts the owner's topics in the other vnodes.
func TestQuotaAcrossVnodes(t *testing.T) {
	c := threeNodes(t, 8)
	q := &metadata.Quota{OwnerTopics: 3}
	created, groups := 0, map[uint64]bool{}
	for i := range 8 {
		name := fmt.Sprintf("q-%d", i)
		cmd := createTopic(name)
		cmd.Owner, cmd.Quota = "carol", q
		via := uint64(i%3 + 1)
		// Each create must see the previous ones, as a client waiting
		// for its answer would.
		for _, g := range c.node(via).Status().Groups {
			if err := c.node(via).Barrier(context.Background(), g.Group); err != nil {
				t.Fatal(err)
			}
		}
		res := c.apply(via, cmd)
		switch res.Err {
		case nil:
			created++
			groups[GroupOfID(res.TopicID)] = true
		case metadata.ErrQuotaExceeded:
		default:
			t.Fatalf("create %s: %v", name, res.Err)
		}
	}
	if created != 3 {
		t.Fatalf("owner with a limit of 3 topics created %d", created)
	}
	if len(groups) < 2 {
		t.Logf("the 3 topics landed in %d vnode(s)", len(groups))
	}
}
