package broker_test

// The operator views of repair, over the wire from a three-node cluster on
// loopback: a byte flipped in every copy of one sealed segment, and in
// one copy of another, shows in `cluster status` (damaged copies, the
// segment the heal cannot fix, each node's disk) and in `topic describe`
// (each copy's state) through any node; the copy that has a healthy peer
// is rebuilt, and the answering node's own copy shows verified once its
// scrub found it whole (another node's copy shows unchecked: a node knows
// only its own verdicts); the others stay damaged.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/pkg/client"
)

func TestClusterRepairViewsOverTheWire(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "views", 1)
	produceSealed(t, n1.b, "views", 60)
	sealed := sealedSegments(t, n1.b, "views")
	if len(sealed) < 2 || len(sealed[0].Replicas) != 3 {
		t.Fatalf("sealed segments %+v, want at least two with three replicas", sealed)
	}
	lost, healed := sealed[0], sealed[1]
	// Copies are worked out only when asked for.
	if d, err := n1.b.DescribeTopic("views"); err != nil || slices.ContainsFunc(d.Ranges[0].Segments, func(s broker.SegmentDescription) bool { return s.Copies != nil }) {
		t.Fatalf("DescribeTopic filled copies: %+v %v", d.Ranges, err)
	}
	if d, err := n1.b.DescribeTopicCopies("views"); err != nil || len(d.Ranges[0].Segments[0].Copies) != 3 {
		t.Fatalf("DescribeTopicCopies: %+v %v", d.Ranges, err)
	}
	c := tc.client(tc.nodes[1], "admin", "admin123")
	before, err := c.ClusterStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if before.Repair == nil {
		t.Fatal("the node reported no repair section")
	}
	for _, n := range before.Nodes {
		if n.Disk != "ok" {
			t.Fatalf("node %d disk %q, want ok", n.ID, n.Disk)
		}
	}
	self := tc.nodes[1].id
	eventually(t, 30*time.Second, "the answering node's own copy verified by its scrub", func() error {
		if d := copiesOf(t, c, healed.ID); !ownVerified(d, self) {
			return fmt.Errorf("segment %d's copies before any damage: %+v, want node %d's verified, the others unchecked", healed.ID, d, self)
		}
		return nil
	})

	for _, name := range lost.Replicas {
		flipMiddleByte(t, tc.node(name).b.SegmentLogPath(lost.ID))
	}
	bad := tc.node(healed.Replicas[len(healed.Replicas)-1])
	flipMiddleByte(t, bad.b.SegmentLogPath(healed.ID))

	eventually(t, 60*time.Second, "every copy of the lost segment reported damaged over the wire, the other rebuilt", func() error {
		st, err := c.ClusterStatus(t.Context())
		if err != nil {
			return err
		}
		r := st.Repair
		for _, name := range lost.Replicas {
			id := tc.node(name).id
			if !slices.Contains(r.Damaged, client.DamagedCopy{Segment: lost.ID, Node: id}) {
				return fmt.Errorf("node %d's copy of segment %d not listed damaged: %+v", id, lost.ID, r.Damaged)
			}
		}
		if !slices.ContainsFunc(r.Problems, func(p client.HealProblem) bool { return p.Segment == lost.ID }) {
			return fmt.Errorf("segment %d not among the problems %+v", lost.ID, r.Problems)
		}
		// Not damaged also reads "unchecked" before the scrubber finds
		// the flip: wait for the damaged copy to be set aside.
		if len(bad.b.QuarantinedCopies(healed.ID)) == 0 {
			return fmt.Errorf("node %d has not set its damaged copy of segment %d aside yet", bad.id, healed.ID)
		}
		if slices.ContainsFunc(r.Damaged, func(d client.DamagedCopy) bool { return d.Segment == healed.ID }) {
			return fmt.Errorf("segment %d still has a damaged copy: %+v", healed.ID, r.Damaged)
		}
		if r.DamagedTotal != len(r.Damaged) || r.ProblemsTotal != len(r.Problems) || r.HealingTotal != len(r.Healing) {
			return fmt.Errorf("totals %d damaged, %d problems, %d healing for lists of %d, %d, %d",
				r.DamagedTotal, r.ProblemsTotal, r.HealingTotal, len(r.Damaged), len(r.Problems), len(r.Healing))
		}
		if r.ScrubCopies == 0 {
			return fmt.Errorf("node 2 scrubs no copies")
		}
		if d := copiesOf(t, c, lost.ID); len(d) != 3 || !allIn(d, client.CopyDamaged) {
			return fmt.Errorf("segment %d's copies %+v, want three damaged", lost.ID, d)
		}
		if d := copiesOf(t, c, healed.ID); len(d) != 3 || !ownVerified(d, self) {
			return fmt.Errorf("segment %d's copies %+v, want node %d's verified, the others unchecked", healed.ID, d, self)
		}
		return nil
	})
	// The damaged copy with healthy peers was replaced: set aside on its
	// node, and a whole copy in its place.
	if len(bad.b.QuarantinedCopies(healed.ID)) == 0 {
		t.Fatalf("node %d set no damaged copy of segment %d aside: it was never rebuilt", bad.id, healed.ID)
	}
	if v, err := bad.b.VerifyLocalCopy(healed.ID); err != nil || !v.Whole() {
		t.Fatalf("node %d's copy of segment %d: %v %v", bad.id, healed.ID, v, err)
	}
	// Every node answers the same from its own view.
	for _, nd := range []*clusterNode{tc.nodes[0], tc.nodes[2]} {
		other := tc.client(nd, "admin", "admin123")
		if d := copiesOf(t, other, lost.ID); !allIn(d, client.CopyDamaged) {
			t.Fatalf("node %d describes segment %d's copies as %+v", nd.id, lost.ID, d)
		}
	}
}

// copiesOf is the copies of segment id of topic "views" as c's node
// describes them; nil when the description fails or lacks the segment.
func copiesOf(t *testing.T, c *client.Client, id uint64) []client.SegmentCopy {
	t.Helper()
	d, err := c.DescribeTopic(t.Context(), "views")
	if err != nil {
		t.Logf("describe: %v", err)
		return nil
	}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.ID == id {
				return s.Copies
			}
		}
	}
	return nil
}

// ownVerified reports whether copies has node self's copy verified and
// every other unchecked.
func ownVerified(copies []client.SegmentCopy, self uint64) bool {
	own := fmt.Sprintf("node-%d", self)
	return slices.ContainsFunc(copies, func(c client.SegmentCopy) bool { return c.Node == own }) &&
		!slices.ContainsFunc(copies, func(c client.SegmentCopy) bool {
			return (c.Node == own) != (c.State == client.CopyVerified) || (c.Node != own && c.State != client.CopyUnchecked)
		})
}

func allIn(copies []client.SegmentCopy, state string) bool {
	return len(copies) > 0 && !slices.ContainsFunc(copies, func(c client.SegmentCopy) bool { return c.State != state })
}
