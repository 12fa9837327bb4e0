package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// A topic kept in one copy per segment, and the node holding some of its
// middle segments stops. Down past --dead-after it is not lost: the
// planner reports the segments lost and declines to record it, and a
// read waits at them. Once an operator removes the node from the cluster,
// each segment is recorded lost: a reader and a consumer group positioned
// before the first hole move past every hole and are told exactly how
// many records they missed; nothing before, between or after the holes is
// lost, and no reader ever gets an empty page in their place. The removed
// node's segment files, started again under a new id, are set aside in
// the quarantine, not deleted.
func TestClusterLostSegmentIsSkippedAndCounted(t *testing.T) {
	tc, o := startOneCopy(t, time.Second)
	want, victim, holes, lost := o.want, o.victim, o.holes, o.lost
	// One offset per record here: the values left are those outside the holes.
	var rest []string
	for i, v := range want {
		if !slices.ContainsFunc(holes, func(s broker.SegmentDescription) bool { return uint64(i) >= s.Base && uint64(i) < s.End }) {
			rest = append(rest, v)
		}
	}
	before := int(holes[0].Base)
	t.Logf("%d segments, %d records lost on %s", len(holes), lost, victim)

	reader := readerBesides(tc, victim)
	// A reader and a group read up to the first hole.
	p, err := reader.Fetch(t.Context(), broker.FetchRequest{Topic: oneCopyTopic, Max: before})
	if err != nil || len(p.Records) != before || p.Skipped != 0 {
		t.Fatalf("read up to the hole: %d records, skipped %d, %v", len(p.Records), p.Skipped, err)
	}
	cur := p.Cursor
	group := "g"
	gp, err := reader.Fetch(t.Context(), broker.FetchRequest{Topic: oneCopyTopic, Group: &group, Max: before})
	if err != nil || len(gp.Records) != before {
		t.Fatalf("group read up to the hole: %d records, %v", len(gp.Records), err)
	}

	back := tc.node(victim)
	tc.stop(back)
	// Dead past --dead-after, and the planner has seen the segments lost
	// and declined: the node is still registered.
	eventually(t, 60*time.Second, "a plan declines to record "+victim+"'s segments lost", func() error {
		for _, nd := range tc.nodes {
			if nd.b != nil && nd.b.LostDeclined() > 0 {
				return nil
			}
		}
		return fmt.Errorf("no plan declined a lost segment yet")
	})
	for _, h := range holes {
		if !slices.ContainsFunc(allSegments(t, reader, oneCopyTopic), func(s broker.SegmentDescription) bool { return s.ID == h.ID }) {
			t.Fatalf("segment %d was dropped while its holder was only down", h.ID)
		}
	}
	if p, err := reader.Fetch(t.Context(), broker.FetchRequest{Topic: oneCopyTopic, Cursor: cur, Max: 1000}); err == nil {
		t.Fatalf("a read at segment %d, whose holder is down, answered %d records, %d skipped", holes[0].ID, len(p.Records), p.Skipped)
	}

	// A removal slower than RemoveNode waits carries on: asked again, or
	// done once the registry no longer lists the node.
	eventually(t, 60*time.Second, "remove "+victim, func() error {
		err := reader.RemoveNode(t.Context(), back.id)
		if err == nil {
			return nil
		}
		for _, n := range reader.ClusterStatus().Nodes {
			if n.ID == back.id && n.Registered {
				return err
			}
		}
		return nil
	})
	eventually(t, 60*time.Second, "the segments of "+victim+" recorded lost", func() error {
		for _, s := range allSegments(t, reader, oneCopyTopic) {
			if slices.Contains(s.Replicas, victim) {
				return fmt.Errorf("segment %d still listed on %v", s.ID, s.Replicas)
			}
		}
		return nil
	})
	// The group commits its position before the holes only now: the
	// holes were recorded before that commit, so nobody of the group can
	// have read them and its count is exact. (Had it committed before the
	// loss, a member might have read the records meanwhile, and its count
	// would be an upper bound, as for retention.)
	if err := reader.Commit(t.Context(), oneCopyTopic, group, *gp.Cursor); err != nil {
		t.Fatal(err)
	}

	for _, who := range []string{"reader", "group"} {
		var got []string
		var skipped uint64
		c := cur
		req := broker.FetchRequest{Topic: oneCopyTopic, Max: 1000}
		if who == "group" {
			c, req.Group = nil, &group
		}
		eventually(t, 20*time.Second, who+" reads past the holes", func() error {
			for len(got) < len(rest)-before {
				req.Cursor = c
				p, err := reader.Fetch(t.Context(), req)
				if err != nil {
					return err
				}
				if len(p.Records) == 0 {
					t.Fatalf("%s: an empty page after %d records", who, len(got))
				}
				if p.SkippedBound {
					t.Fatalf("%s: the skip count is only a bound", who)
				}
				skipped += p.Skipped
				got = append(got, values(p.Records)...)
				c = p.Cursor
				if who == "group" {
					if err := reader.Commit(t.Context(), oneCopyTopic, group, *p.Cursor); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if !slices.Equal(got, rest[before:]) {
			t.Fatalf("%s read %d records after the first hole that differ from the %d produced", who, len(got), len(rest)-before)
		}
		if skipped != lost {
			t.Fatalf("%s was told %d records skipped, want %d", who, skipped, lost)
		}
	}
	st, err := reader.DescribeGroup(oneCopyTopic, group)
	if err != nil || st.Skipped != lost || st.SkippedBound {
		t.Fatalf("group describe: skipped %d (bound %v), %v; want %d exactly", st.Skipped, st.SkippedBound, err, lost)
	}
	// A new reader from the start gets everything that survived.
	checkRead(t, reader, oneCopyTopic, rest)

	// The removed machine starts again under a new id on its old segment
	// files: it finds segments recorded lost, and sets their files aside.
	keepOnlySegments(t, back.dir)
	back.id, back.peer, back.gossip = maxNodeID(tc)+1, freeAddr(t), freeAddr(t)
	cfg := tc.config(back, []string{readerNode(tc, reader).gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = broker.HealConfig{DeadAfter: time.Second, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc.openHeal(back, cfg)
	eventually(t, 30*time.Second, "the old copies of lost segments quarantined", func() error {
		for _, s := range holes {
			if back.b.HasLocalCopy(s.ID) || len(back.b.QuarantinedCopies(s.ID)) == 0 {
				return fmt.Errorf("segment %d: held %v, quarantined %v", s.ID, back.b.HasLocalCopy(s.ID), back.b.QuarantinedCopies(s.ID))
			}
		}
		return nil
	})
	kept := back.b.KeptLostCopies()
	for _, s := range holes {
		if !slices.Contains(kept, s.ID) {
			t.Fatalf("segment %d quarantined but not reported: %v", s.ID, kept)
		}
	}
	checkRead(t, back.b, oneCopyTopic, rest)
}

// keepOnlySegments empties a stopped node's data directory but for its
// segment store.
func keepOnlySegments(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "segments" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// maxNodeID is the highest node id of the cluster.
func maxNodeID(tc *testCluster) uint64 {
	var top uint64
	for _, nd := range tc.nodes {
		top = max(top, nd.id)
	}
	return top
}

// readerNode is the node whose broker is b.
func readerNode(tc *testCluster, b *broker.Broker) *clusterNode {
	for _, nd := range tc.nodes {
		if nd.b == b {
			return nd
		}
	}
	return nil
}

// allSegments lists the topic's segments as b sees them, the active one
// included.
func allSegments(t *testing.T, b *broker.Broker, topic string) []broker.SegmentDescription {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []broker.SegmentDescription
	for _, r := range d.Ranges {
		out = append(out, r.Segments...)
	}
	return out
}

// pickVictim names a node holding some segments of segs, but neither the
// first nor the last.
func pickVictim(segs []broker.SegmentDescription) string {
	if len(segs) < 3 {
		return ""
	}
	edge := slices.Concat(segs[0].Replicas, segs[len(segs)-1].Replicas)
	for _, s := range segs[1 : len(segs)-1] {
		for _, r := range s.Replicas {
			if !slices.Contains(edge, r) {
				return r
			}
		}
	}
	return ""
}

// oneCopy is a single-copy topic whose segments a victim node holds in
// the middle only.
type oneCopy struct {
	want   []string
	victim string
	holes  []broker.SegmentDescription
	lost   uint64
}

const oneCopyTopic = "onecopy"

// startOneCopy starts three nodes healing with deadAfter, and produces to
// a topic kept in one copy, through every node in turn, until some node
// holds sealed segments but neither the first nor the last.
func startOneCopy(t *testing.T, deadAfter time.Duration) (*testCluster, oneCopy) {
	t.Helper()
	tc := startHealCluster(t, 3, 2<<10, broker.HealConfig{
		DeadAfter: deadAfter, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour,
	})
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	eventually(t, 20*time.Second, "create the single-copy topic", func() error {
		return tc.nodes[0].b.CreateTopicReplicatedAs(t.Context(), admin, oneCopyTopic, 0, 1, 1)
	})
	for _, o := range tc.nodes {
		eventually(t, 10*time.Second, "topic on node", func() error { return hasTopics(o.b, oneCopyTopic) })
	}
	var o oneCopy
	var segs []broker.SegmentDescription
	for round := 0; round < 80 && o.victim == ""; round++ {
		o.want = append(o.want, produceSealed(t, tc.nodes[round%len(tc.nodes)].b, oneCopyTopic, 12)...)
		segs = allSegments(t, tc.nodes[0].b, oneCopyTopic)
		o.victim = pickVictim(segs)
	}
	if o.victim == "" {
		t.Fatalf("no node holds segments in the middle only, among %d", len(segs))
	}
	for _, s := range segs {
		if slices.Contains(s.Replicas, o.victim) {
			if s.Active || len(s.Replicas) != 1 || s.Records != s.End-s.Base {
				t.Fatalf("segment %d: active %v, replicas %v, %d records in [%d, %d)", s.ID, s.Active, s.Replicas, s.Records, s.Base, s.End)
			}
			o.holes = append(o.holes, s)
			o.lost += s.Records
		}
	}
	return tc, o
}

// readerBesides is a node other than name.
func readerBesides(tc *testCluster, name string) *broker.Broker {
	for _, nd := range tc.nodes {
		if "node-"+fmt.Sprint(nd.id) != name && nd.b != nil {
			return nd.b
		}
	}
	return nil
}

// TestClusterDownHolderIsNotLost stops the holder of a single-copy
// topic's middle segments with --dead-after far away: once gossip sees
// it down, nothing is recorded lost, a read of the segments is refused
// (never an empty page past them, never a skip), and once the node is
// back every record is read.
func TestClusterDownHolderIsNotLost(t *testing.T) {
	tc, o := startOneCopy(t, time.Hour)
	reader := readerBesides(tc, o.victim)
	hole := o.holes[0]
	victim := tc.node(o.victim)
	tc.stop(victim)
	eventually(t, 30*time.Second, o.victim+" seen down", func() error {
		for _, n := range reader.ClusterStatus().Nodes {
			if n.ID == victim.id && n.Liveness != "alive" && n.Liveness != "suspect" {
				return nil
			}
		}
		return fmt.Errorf("%s not seen down", o.victim)
	})
	cur := (*string)(nil)
	for got := 0; ; {
		// Pages up to the segment, then one at it: a page that reaches a
		// segment no copy answers fails whole.
		p, err := reader.Fetch(t.Context(), broker.FetchRequest{Topic: oneCopyTopic, Cursor: cur, Max: max(int(hole.Base)-got, 1)})
		if err != nil {
			if got != int(hole.Base) {
				t.Fatalf("refused after %d records, want the %d before segment %d: %v", got, hole.Base, hole.ID, err)
			}
			break // refused at the segment no copy answers
		}
		if len(p.Records) == 0 || p.Skipped != 0 {
			t.Fatalf("after %d records: a page of %d records, %d skipped, with the holder only down", got, len(p.Records), p.Skipped)
		}
		got += len(p.Records)
		if got > int(hole.Base) {
			t.Fatalf("read %d records, past segment %d at %d, whose holder is down", got, hole.ID, hole.Base)
		}
		cur = p.Cursor
	}
	if !slices.ContainsFunc(allSegments(t, reader, oneCopyTopic), func(s broker.SegmentDescription) bool { return s.ID == hole.ID }) {
		t.Fatalf("segment %d was dropped from the metadata while its holder was only down", hole.ID)
	}
	join := tc.nodes[0].gossip
	if victim == tc.nodes[0] {
		join = tc.nodes[1].gossip
	}
	cfg := tc.config(victim, []string{join})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = broker.HealConfig{DeadAfter: time.Hour, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc.openHeal(victim, cfg)
	checkRead(t, reader, oneCopyTopic, o.want)
}
