package broker_test

// Edges of self-healing and scrubbing: more damaged copies than one
// gossip attribute holds, damaged copies of a topic that is then deleted,
// a listed node that lost a copy from its disk, and a node back within
// its dead-after grace.

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// scrubEverything is a repair setting that scrubs every copy often and
// declares no node dead during a test.
var scrubEverything = broker.HealConfig{
	DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
	ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
}

// damagedOn is the segments st reports damaged on node.
func damagedOn(st *broker.HealStatus, node uint64) []uint64 {
	if st == nil {
		return nil
	}
	var out []uint64
	for _, d := range st.Damaged {
		if d.Node == node {
			out = append(out, d.Segment)
		}
	}
	return out
}

// A node with many damaged copies must report every one of them: a copy
// nobody knows is damaged is counted as healthy. (Damage once travelled
// in one short gossip value that held about four segment ids; the
// metadata's damaged set has no such limit.)
func TestClusterReportsEveryDamagedCopy(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, scrubEverything)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "many", 1)
	want := produceSealed(t, n1.b, "many", 120)
	sealed := sealedSegments(t, n1.b, "many")
	if len(sealed) < 6 {
		t.Fatalf("%d sealed segments, want at least 6", len(sealed))
	}
	// Every copy of the six is damaged, so none has a healthy source to
	// be rebuilt from and the reports stay.
	tc.waitCopiesWhole(sealed[:6]...)
	bad := tc.nodes[2]
	var ids []uint64
	damaged := map[uint64][]byte{} // bad's copies as flipped
	for _, s := range sealed[:6] {
		for _, nd := range tc.nodes {
			b := flipMiddleByte(t, nd.b.SegmentLogPath(s.ID))
			if nd == bad {
				damaged[s.ID] = b
			}
		}
		ids = append(ids, s.ID)
	}
	eventually(t, 30*time.Second, fmt.Sprintf("node %d's scrubber finds all 6 damaged copies", bad.id), func() error {
		for _, id := range ids {
			if v, err := bad.b.VerifyLocalCopy(id); err != nil || v.Whole() {
				return fmt.Errorf("segment %d verifies %v (%v)", id, v, err)
			}
		}
		return nil
	})
	for _, nd := range tc.nodes {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d reports node %d's 6 damaged copies", nd.id, bad.id), func() error {
			got := damagedOn(nd.b.ClusterStatus().Heal, bad.id)
			for _, id := range ids {
				if !slices.Contains(got, id) {
					return fmt.Errorf("segment %d missing from the damaged copies %v", id, got)
				}
			}
			return nil
		})
	}
	readNeverWrong(t, bad.b, "many", want)
	// The copies are flipped one node after another, so a holder whose
	// damage was recorded first may have begun a rebuild from one not yet
	// recorded and set its copy aside: its bytes must still be on the node.
	for _, id := range ids {
		if !keepsBytes(t, bad, id, damaged[id]) {
			t.Fatalf("node %d deleted its damaged copy of segment %d, which nothing replaced", bad.id, id)
		}
	}
}

// A damaged copy whose segment the metadata then deletes (its topic
// deleted) is gone: it must not stay reported, nor keep a place in the
// bounded gossip attribute that later damaged copies need.
func TestClusterForgetsADamagedCopyWhenItsTopicIsDeleted(t *testing.T) {
	tc := startHealCluster(t, 3, 2<<10, scrubEverything)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "doomed", 1)
	produceSealed(t, n1.b, "doomed", 40)
	seg := sealedSegments(t, n1.b, "doomed")[0]
	bad := tc.nodes[2]
	// Every copy is damaged, so none is rebuilt before the delete.
	tc.waitCopiesWhole(seg)
	for _, nd := range tc.nodes {
		flipMiddleByte(t, nd.b.SegmentLogPath(seg.ID))
	}
	eventually(t, 30*time.Second, "the damaged copy reported", func() error {
		if got := damagedOn(bad.b.ClusterStatus().Heal, bad.id); !slices.Contains(got, seg.ID) {
			return fmt.Errorf("damaged copies %v", got)
		}
		return nil
	})
	eventually(t, 20*time.Second, "delete the topic", func() error { return n1.b.DeleteTopic(t.Context(), "doomed") })
	eventually(t, 20*time.Second, "the deleted copy no longer held or reported", func() error {
		if bad.b.HasLocalCopy(seg.ID) {
			return fmt.Errorf("node %d still holds segment %d", bad.id, seg.ID)
		}
		for _, nd := range tc.nodes {
			if got := damagedOn(nd.b.ClusterStatus().Heal, bad.id); slices.Contains(got, seg.ID) {
				return fmt.Errorf("node %d still reports deleted segment %d damaged on node %d", nd.id, seg.ID, bad.id)
			}
		}
		return nil
	})
}

// copiesWhole is checkCopiesWhole as a condition: every listed replica
// holds a copy that verifies against the seal.
func (tc *testCluster) copiesWhole(seg broker.SegmentDescription) error {
	for _, name := range seg.Replicas {
		nd := tc.node(name)
		if nd.b == nil {
			return fmt.Errorf("%s is stopped", name)
		}
		v, err := nd.b.VerifyLocalCopy(seg.ID)
		if err != nil || !v.Whole() {
			return fmt.Errorf("segment %d on %s: %v %v", seg.ID, name, v, err)
		}
	}
	return nil
}

// A node that comes back having lost a copy from its disk (a restored
// backup, a replaced disk, an operator's mistake) is still listed for
// it. The cluster must notice that the listed copy is not there and heal
// the segment back to three whole copies, rather than count the missing
// copy as healthy for ever.
func TestClusterHealsACopyMissingFromAListedNodesDisk(t *testing.T) {
	tc := startHealCluster(t, 4, 2<<10, scrubEverything)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "lost", 1)
	want := produceSealed(t, n1.b, "lost", 40)
	seg := tc.wholeSealed(n1.b, "lost")
	tc.checkCopiesWhole(seg)
	var victim *clusterNode
	for _, name := range seg.Replicas {
		if name != "node-1" {
			victim = tc.node(name)
			break
		}
	}
	path := victim.b.SegmentLogPath(seg.ID)
	tc.stop(victim)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cfg := tc.config(victim, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = scrubEverything
	tc.openHeal(victim, cfg)

	eventually(t, 60*time.Second, fmt.Sprintf("segment %d back at three whole copies", seg.ID), func() error {
		for _, s := range sealedSegments(t, n1.b, "lost") {
			if s.ID != seg.ID {
				continue
			}
			if len(s.Replicas) != 3 {
				return fmt.Errorf("replicas %v", s.Replicas)
			}
			return tc.copiesWhole(s)
		}
		return fmt.Errorf("segment %d is gone", seg.ID)
	})
	for _, nd := range tc.nodes {
		checkRead(t, nd.b, "lost", want)
	}
}

// A node down for less than its dead-after grace keeps its place: while
// it is away nothing is healed around it, and once it is back every copy it held is still listed and still on
// its disk. (An active segment it followed is rolled off it when it goes,
// which seals it with its replicas as they were.)
func TestClusterNodeBackWithinDeadAfterKeepsEveryCopy(t *testing.T) {
	tc := startHealCluster(t, 4, 2<<10, scrubEverything)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "brief", 1)
	want := produceSealed(t, n1.b, "brief", 40)
	before := sealedSegments(t, n1.b, "brief")
	d, err := n1.b.DescribeTopic("brief")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Active {
				before = append(before, s) // sealed by a roll while the node is away
			}
		}
	}
	var away *clusterNode
	for _, name := range before[0].Replicas {
		if name != "node-1" {
			away = tc.node(name)
			break
		}
	}
	awayName := fmt.Sprintf("node-%d", away.id)
	// held are the copies the node has when it stops: a follower's copy
	// of the active segment may not exist yet (its quorum acked without
	// it), and a copy never made is the heal's to fill, not one to keep.
	var held []uint64
	for _, s := range before {
		if slices.Contains(s.Replicas, awayName) && away.b.HasLocalCopy(s.ID) {
			held = append(held, s.ID)
		}
	}
	if len(held) == 0 {
		t.Fatalf("%s holds none of the copies it is listed for", awayName)
	}
	tc.stop(away)
	eventually(t, 30*time.Second, "node 1 sees "+awayName+" down", func() error {
		for _, n := range n1.b.ClusterStatus().Nodes {
			if n.ID == away.id && n.Liveness != "alive" && n.Liveness != "suspect" {
				return nil
			}
		}
		return fmt.Errorf("%s not down yet", awayName)
	})
	// Heal passes run every 100ms while the rest of the topic is read.
	for _, nd := range tc.nodes {
		if nd.b != nil {
			checkRead(t, nd.b, "brief", want)
		}
	}
	if h := n1.b.ClusterStatus().Heal; h != nil && len(h.Healing) > 0 {
		t.Fatalf("node 1 heals %+v within %s's grace", h.Healing, awayName)
	}
	for _, s := range sealedSegments(t, n1.b, "brief") {
		i := slices.IndexFunc(before, func(b broker.SegmentDescription) bool { return b.ID == s.ID })
		if i < 0 || !slices.Equal(s.Replicas, before[i].Replicas) {
			t.Fatalf("segment %d: replicas %v while %s was away, want them unchanged", s.ID, s.Replicas, awayName)
		}
	}
	cfg := tc.config(away, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = scrubEverything
	tc.openHeal(away, cfg)
	checkRead(t, away.b, "brief", want)
	for _, id := range held {
		if !away.b.HasLocalCopy(id) {
			t.Fatalf("%s lost its copy of segment %d on coming back within its grace", awayName, id)
		}
	}
	for _, s := range sealedSegments(t, n1.b, "brief") {
		if slices.Contains(held, s.ID) && !slices.Contains(s.Replicas, awayName) {
			t.Fatalf("segment %d: replicas %v, %s dropped within its grace", s.ID, s.Replicas, awayName)
		}
	}
}

// within is eventually that reports with t.Errorf, so a test can check
// more than one thing after a failure.
func within(t *testing.T, d time.Duration, what string, fn func() error) bool {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return true
		}
		select {
		case <-deadline:
			t.Errorf("%s: not within %v: %v", what, d, err)
			return false
		case <-tick.C:
		}
	}
}

// A node that found a copy damaged and restarts before it is replaced
// must still treat it as damaged: not served, recorded, so the planners
// keep counting it out and it is rebuilt. Forgetting it on restart makes
// the copy count as healthy again until the next scrub reaches it, which
// can be a whole ScrubInterval (a day by default) later.
func TestClusterRestartedNodeStillRebuildsItsDamagedCopy(t *testing.T) {
	// Until the restart no heal pass runs, so the damage is only found
	// (and marked in the store), neither recorded nor repaired.
	hc := scrubEverything
	hc.Interval = time.Hour
	tc := startHealCluster(t, 3, 2<<10, hc)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "remember", 1)
	want := produceSealed(t, n1.b, "remember", 40)
	seg := sealedSegments(t, n1.b, "remember")[0]
	bad := tc.nodes[2]
	flipMiddleByte(t, bad.b.SegmentLogPath(seg.ID))
	eventually(t, 30*time.Second, "the damaged copy found", func() error {
		if got := damagedOn(bad.b.ClusterStatus().Heal, bad.id); !slices.Contains(got, seg.ID) {
			return fmt.Errorf("damaged copies %v", got)
		}
		return nil
	})
	tc.stop(bad)
	cfg := tc.config(bad, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = scrubEverything
	cfg.Cluster.Heal.ScrubInterval = time.Hour // the next scrub of the copy is far off
	tc.openHeal(bad, cfg)

	// With no spare node the holder then records the damage and rebuilds
	// its copy from a healthy replica, the damaged file set aside, which
	// it does only for a damage the metadata records. Until then the
	// copy is reported damaged; it is never served.
	within(t, 20*time.Second, fmt.Sprintf("node %d rebuilds its damaged copy of segment %d after a restart", bad.id, seg.ID), func() error {
		readNeverWrong(t, bad.b, "remember", want)
		if len(bad.b.QuarantinedCopies(seg.ID)) == 0 {
			return fmt.Errorf("nothing set aside")
		}
		if v, err := bad.b.VerifyLocalCopy(seg.ID); err != nil || !v.Whole() {
			return fmt.Errorf("the copy verifies %v (%v)", v, err)
		}
		if got := damagedOn(n1.b.ClusterStatus().Heal, bad.id); slices.Contains(got, seg.ID) {
			return fmt.Errorf("still reported damaged")
		}
		return nil
	})
	within(t, 20*time.Second, fmt.Sprintf("every record read through node %d", bad.id), func() error {
		return readEverything(t, bad.b, "remember", want)
	})
}

// readEverything reads topic from its start through b and answers an
// error unless it gets exactly want.
func readEverything(t *testing.T, b *broker.Broker, topic string, want []string) error {
	t.Helper()
	var cur *string
	var got []string
	for len(got) < len(want) {
		p, err := b.Fetch(t.Context(), broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
		if err != nil {
			return fmt.Errorf("after %d records: %w", len(got), err)
		}
		if len(p.Records) == 0 {
			return fmt.Errorf("an empty page after %d of %d records", len(got), len(want))
		}
		got = append(got, values(p.Records)...)
		cur = p.Cursor
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("read %d records that differ from the %d produced", len(got), len(want))
	}
	return nil
}

// A read that meets a batch failing its CRC has found a damaged copy as
// surely as the scrubber would: the node has two healthy replicas to
// read from, and must not keep answering "corrupt" until the scrubber's
// next turn at the copy, which can be a whole ScrubInterval away.
func TestClusterReadThroughAnUnscrubbedDamagedCopyAnswersFromAnotherReplica(t *testing.T) {
	hc := scrubEverything
	hc.ScrubInterval = time.Hour // the scrubber will not get there first
	tc := startHealCluster(t, 3, 2<<10, hc)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "readfound", 1)
	want := produceSealed(t, n1.b, "readfound", 40)
	seg := sealedSegments(t, n1.b, "readfound")[0]
	bad := tc.nodes[2]
	flipMiddleByte(t, bad.b.SegmentLogPath(seg.ID))
	readNeverWrong(t, bad.b, "readfound", want)
	within(t, 20*time.Second, fmt.Sprintf("every record read through node %d", bad.id), func() error {
		return readEverything(t, bad.b, "readfound", want)
	})
}

// healProblems gathers what each running node's last heal plan could not
// do, for a failure's message.
func healProblems(tc *testCluster) []string {
	var out []string
	for _, nd := range tc.nodes {
		if nd.b == nil {
			continue
		}
		if h := nd.b.ClusterStatus().Heal; h != nil {
			for _, p := range h.Problems {
				out = append(out, fmt.Sprintf("node %d: segment %d %s %s", nd.id, p.Segment, p.Problem, p.Detail))
			}
		}
	}
	return out
}
