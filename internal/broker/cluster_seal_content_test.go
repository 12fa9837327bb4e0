package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// A failover seals the restarted primary's segment knowing only its end;
// the first copy sealed at that end then records the records, bytes and
// content hash, so describe, retention and heals see the segment's real
// content, and every surviving copy's footer matches what was recorded.
func TestClusterFailoverSealRecordsContent(t *testing.T) {
	failoverSealRecordsContent(t, startCluster(t, 3))
}

// When no holder's attempt after its seal reached the control plane, the
// scrub that finds a copy whole records the content.
func TestClusterScrubRecordsAFailoverSealsContent(t *testing.T) {
	defer broker.SkipContentOnSeal()()
	failoverSealRecordsContent(t, startHealCluster(t, 3, 0, broker.HealConfig{
		DeadAfter: time.Hour, Interval: 100 * time.Millisecond,
		ScrubInterval: 300 * time.Millisecond, ScrubRate: 64 << 20,
	}))
}

func failoverSealRecordsContent(t *testing.T, tc *testCluster) {
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "content", 1)
	if _, err := n1.Produce(ctx, "content", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	old := activeSegment(t, n1, "content")
	tc.waitVoters(3)
	h := produceLoop(ctx, n1, "content", replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the restart", h.ackedAtLeast(200))
	h.finish(t)
	acked := uint64(h.ackedCount() + 1)

	tc.stop(tc.nodes[0])
	tc.open(tc.nodes[0], []string{tc.nodes[1].gossip})
	eventually(t, 60*time.Second, "a produce through the restarted node", func() error {
		_, err := tc.nodes[0].b.Produce(ctx, "content", []broker.Record{rec("a", "after")})
		return err
	})
	eventually(t, 30*time.Second, "the failed-over segment's content recorded", func() error {
		d, err := tc.nodes[2].b.DescribeTopic("content")
		if err != nil {
			return err
		}
		for _, s := range d.Ranges[0].Segments {
			if s.ID != old.ID {
				continue
			}
			if s.Active || s.Records < acked || s.Records != s.End-s.Base || s.Bytes == 0 {
				return fmt.Errorf("segment %d: %+v, want sealed with its %d+ records counted", s.ID, s, acked)
			}
			return nil
		}
		return fmt.Errorf("segment %d not described", old.ID)
	})
	recorded, _ := tc.nodes[2].b.SealContentHashes(old.ID)
	if recorded == 0 {
		t.Fatal("no content hash recorded for the failed-over segment")
	}
	eventually(t, 30*time.Second, "every copy sealed with the recorded hash", func() error {
		for _, n := range tc.nodes {
			if _, local := n.b.SealContentHashes(old.ID); local != recorded {
				return fmt.Errorf("node %d's copy has hash %x, recorded %x", n.id, local, recorded)
			}
		}
		return nil
	})
	sameHistory(t, h, "content", tc.nodes[2], tc.nodes[0], tc.nodes[1])
}
