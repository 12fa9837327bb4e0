package broker_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// diskFull makes every segment journal write and space probe under dir
// fail with ENOSPC while full is set: the node's disk ran out of space.
func diskFull(dir string, full *atomic.Bool) vfs.Rule {
	segs := filepath.Join(dir, "segments")
	return func(op vfs.Op, name string) error {
		if full.Load() && op == vfs.OpWrite && strings.HasPrefix(name, segs) &&
			(strings.HasSuffix(name, ".jnl") || strings.Contains(name, "probe")) {
			return vfs.Torn(0, syscall.ENOSPC)
		}
		return nil
	}
}

// diskOf is node id's disk state in nd's cluster status.
func diskOf(nd *clusterNode, id uint64) string {
	for _, n := range nd.b.ClusterStatus().Nodes {
		if n.ID == id {
			return n.Disk
		}
	}
	return ""
}

// topicSegments lists the topic's segments as b sees them.
func topicSegments(t *testing.T, b *broker.Broker, topic string) []broker.SegmentDescription {
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

// produceThroughAll produces n records through every node in turn,
// retrying each until it is acknowledged, and returns the acknowledged
// values in order.
func produceThroughAll(t *testing.T, tc *testCluster, topic, tag string, n int) []string {
	t.Helper()
	pad := strings.Repeat("x", 200)
	var acked []string
	for i := 0; i < n; i++ {
		nd := tc.nodes[i%len(tc.nodes)]
		v := tag + "-" + strconv.Itoa(i) + pad
		eventually(t, 20*time.Second, fmt.Sprintf("produce %s %d through node %d", tag, i, nd.id), func() error {
			_, err := nd.b.Produce(t.Context(), topic, []broker.Record{rec("k", v)})
			return err
		})
		acked = append(acked, v)
	}
	return acked
}

// inOrder reports whether want appears in got in order (a produce retried
// after an ambiguous failure may add a duplicate, never lose one).
func inOrder(got, want []string) error {
	i := 0
	for _, v := range got {
		if i < len(want) && v == want[i] {
			i++
		}
	}
	if i < len(want) {
		return fmt.Errorf("acknowledged record %d of %d missing from the %d read", i, len(want), len(got))
	}
	return nil
}

// A node whose disk fills stops taking replicas and rolls away: produce
// through every node, the full one included, keeps working, segments
// opened meanwhile avoid it, nothing acknowledged is lost, its sealed
// copies are still read; once space returns it takes replicas again.
func TestClusterDiskFullRollsAwayAndComesBack(t *testing.T) {
	diskFullRollsAwayAndComesBack(t, diskFull)
}

// segmentFilesFull makes every segment file write and space probe under
// dir fail with ENOSPC while full is set, journal writes still going
// through: the journal's write-behind finds the disk full, so commit
// rounds wait, durable in the journal, until the probe finds room.
func segmentFilesFull(dir string, full *atomic.Bool) vfs.Rule {
	segs := filepath.Join(dir, "segments")
	return func(op vfs.Op, name string) error {
		if full.Load() && op == vfs.OpWrite && strings.HasPrefix(name, segs) &&
			(strings.HasSuffix(name, ".log") || strings.Contains(name, "probe")) {
			return vfs.Torn(7, syscall.ENOSPC)
		}
		return nil
	}
}

// The same with the disk found full by a segment file write behind the
// journal: the node's rounds wait rather than being refused, and a roll
// waiting behind them does not keep the disk check from finding room.
func TestClusterDiskFullOnSegmentFileWrite(t *testing.T) {
	diskFullRollsAwayAndComesBack(t, segmentFilesFull)
}

func diskFullRollsAwayAndComesBack(t *testing.T, fill func(dir string, full *atomic.Bool) vfs.Rule) {
	tc := &testCluster{t: t, log: quietLogger()}
	root := t.TempDir()
	t.Cleanup(tc.closeAll)
	var full atomic.Bool
	for i := 1; i <= 3; i++ {
		nd := &clusterNode{id: uint64(i), dir: filepath.Join(root, fmt.Sprint(i)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t), replicas: 3}
		if i == 3 {
			nd.fs = vfs.NewFaulty(vfs.OS(), fill(nd.dir, &full))
		}
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		cfg := tc.config(nd, join)
		cfg.SegmentMaxBytes = 2 << 10
		cfg.Cluster.Heal = broker.HealConfig{DeadAfter: time.Hour, Interval: time.Hour, ScrubInterval: time.Hour}
		tc.openHeal(nd, cfg)
		if i == 1 {
			if _, err := nd.b.SeedUsers(t.Context(), true, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	n1, n3 := tc.nodes[0], tc.nodes[2]
	tc.createEverywhere(n1, "disk", 1)
	want := produceThroughAll(t, tc, "disk", "before", 30)
	var held []broker.SegmentDescription
	for _, s := range topicSegments(t, n1.b, "disk") {
		if !s.Active && slices.Contains(s.Replicas, "node-3") {
			held = append(held, s)
		}
	}
	if len(held) == 0 {
		t.Fatal("node 3 holds no sealed copy before its disk fills")
	}

	full.Store(true)
	// Node 3 finds out at its next write (as a follower or as a primary);
	// produce until every node sees its disk full.
	eventually(t, 30*time.Second, "node 3's disk full in every node's status", func() error {
		want = append(want, produceThroughAll(t, tc, "disk", "filling", 3)...)
		for _, nd := range tc.nodes {
			if d := diskOf(nd, 3); d != "full" {
				return fmt.Errorf("node %d sees node 3's disk %q", nd.id, d)
			}
		}
		return nil
	})
	// Segments opened from now on avoid node 3: its own were rolled
	// away, and the ones it followed roll at their size.
	var last uint64
	for _, s := range topicSegments(t, n1.b, "disk") {
		last = max(last, s.ID)
	}
	want = append(want, produceThroughAll(t, tc, "disk", "full", 60)...)
	fresh := 0
	for _, s := range topicSegments(t, n1.b, "disk") {
		if s.ID <= last {
			continue
		}
		fresh++
		if slices.Contains(s.Replicas, "node-3") {
			t.Fatalf("segment %d opened while node 3's disk is full has replicas %v", s.ID, s.Replicas)
		}
	}
	if fresh == 0 {
		t.Fatal("no segment opened while node 3's disk was full")
	}
	for _, nd := range tc.nodes {
		if err := inOrder(values(readAll(t, nd.b, "disk", len(want))), want); err != nil {
			t.Fatalf("read through node %d: %v", nd.id, err)
		}
	}
	for _, s := range held {
		if _, err := n3.b.LocalCopyBytes(s.ID); err != nil {
			t.Fatalf("node 3's sealed copy of segment %d while its disk is full: %v", s.ID, err)
		}
	}

	full.Store(false)
	eventually(t, 30*time.Second, "node 3's disk ok again", func() error {
		for _, nd := range tc.nodes {
			if d := diskOf(nd, 3); d != "ok" {
				return fmt.Errorf("node %d sees node 3's disk %q", nd.id, d)
			}
		}
		return nil
	})
	for _, s := range topicSegments(t, n1.b, "disk") {
		last = max(last, s.ID)
	}
	eventually(t, 30*time.Second, "a new segment on node 3", func() error {
		want = append(want, produceThroughAll(t, tc, "disk", "back", 10)...)
		for _, s := range topicSegments(t, n1.b, "disk") {
			if s.ID > last && slices.Contains(s.Replicas, "node-3") {
				return nil
			}
		}
		return fmt.Errorf("no segment after %d lists node 3", last)
	})
	if err := inOrder(values(readAll(t, n3.b, "disk", len(want))), want); err != nil {
		t.Fatalf("read through node 3: %v", err)
	}
}
