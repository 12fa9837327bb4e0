package broker_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// A topic kept in one copy per segment has no peer to repair from. A
// damaged batch in its sealed copy fails reads at that batch (S1) while
// the records before it are still served; the copy must never be set
// aside as damaged, which would make readers skip the whole segment
// (T1, R4). A replicated topic damaged on the same node shows the
// scrubber ran over that node's copies meanwhile.
func TestClusterDamagedSingleCopyIsNeverSkipped(t *testing.T) {
	tc := startHealCluster(t, 4, 2<<10, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	})
	n1 := tc.nodes[0]
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	eventually(t, 20*time.Second, "create the single-copy topic", func() error {
		return n1.b.CreateTopicReplicatedAs(t.Context(), admin, "single", 0, 1, 1)
	})
	tc.createEverywhere(n1, "mirror", 1)
	want := produceSealed(t, n1.b, "single", 40)
	produceSealed(t, n1.b, "mirror", 40)

	single := sealedSegments(t, n1.b, "single")[0]
	if len(single.Replicas) != 1 {
		t.Fatalf("single-copy topic's segment has replicas %v", single.Replicas)
	}
	holder := tc.node(single.Replicas[0])
	var mirror broker.SegmentDescription
	for _, s := range sealedSegments(t, n1.b, "mirror") {
		if slices.Contains(s.Replicas, single.Replicas[0]) {
			mirror = s
			break
		}
	}
	if mirror.ID == 0 {
		t.Fatalf("no sealed mirror segment on %s", single.Replicas[0])
	}
	flipMiddleByte(t, holder.b.SegmentLogPath(single.ID))
	flipMiddleByte(t, holder.b.SegmentLogPath(mirror.ID))

	eventually(t, 60*time.Second, "the replicated copy found damaged and replaced", func() error {
		for _, s := range sealedSegments(t, n1.b, "mirror") {
			if s.ID == mirror.ID && slices.Contains(s.Replicas, single.Replicas[0]) {
				return fmt.Errorf("segment %d still listed on %s", s.ID, single.Replicas[0])
			}
		}
		return nil
	})
	if h := holder.b.ClusterStatus().Heal; h != nil && slices.Contains(h.Damaged, broker.DamagedSegment{Segment: single.ID, Node: holder.id}) {
		t.Fatalf("the only copy of segment %d was set aside as damaged", single.ID)
	}
	for _, nd := range tc.nodes {
		readStopsAtDamage(t, nd.b, "single", want)
	}
}

// readStopsAtDamage reads topic from its start through b: the records
// read must be a prefix of want, and a read that ends short of want must
// end on an error (the damaged batch), never on an empty page, which
// would tell the reader it caught up past records it never got.
func readStopsAtDamage(t *testing.T, b *broker.Broker, topic string, want []string) {
	t.Helper()
	var cur *string
	var got []string
	for len(got) < len(want) {
		p, err := b.Fetch(t.Context(), broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
		if err != nil {
			if errors.Is(err, t.Context().Err()) && t.Context().Err() != nil {
				t.Fatal(err)
			}
			return
		}
		if len(p.Records) == 0 {
			t.Fatalf("read %d of %d records, then an empty page: the damaged segment was skipped", len(got), len(want))
		}
		got = append(got, values(p.Records)...)
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("records read differ from those produced after %d", len(got))
		}
		cur = p.Cursor
	}
	t.Fatalf("read all %d records through a copy with a flipped byte", len(want))
}
