package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// memberFetch reads one page as member of group g.
func memberFetch(t *testing.T, b *Broker, topic, member string) Page {
	t.Helper()
	g, m := "g", member
	p, err := b.Fetch(context.Background(), FetchRequest{Topic: topic, Group: &g, Member: &m, Max: 1000})
	if err != nil {
		t.Fatalf("fetch as %s: %v", member, err)
	}
	return p
}

func produceKeys(t *testing.T, b *Broker, topic string, n int) {
	t.Helper()
	for i := range n {
		mustProduce(t, b, topic, rec(fmt.Sprintf("k%03d", i), i))
	}
}

// TestMemberHeartbeatKeepsRanges: a member that heartbeats while it
// works through a page keeps its ranges from a member that joined; once
// it fetches again, they pass.
func TestMemberHeartbeatKeepsRanges(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	produceKeys(t, b, "t", 40)
	if p := memberFetch(t, b, "t", "ann"); len(p.Records) != 40 {
		t.Fatalf("the sole member read %d of 40 records", len(p.Records))
	}
	st, err := b.MemberHeartbeat("t", "g", "ann")
	if err != nil || st.Ranges != 4 || st.Members != 1 {
		t.Fatalf("heartbeat of the sole member: %+v, %v", st, err)
	}
	if p := memberFetch(t, b, "t", "bob"); len(p.Records) != 0 {
		t.Fatalf("bob read %d records that ann holds", len(p.Records))
	}
	if _, err := b.MemberHeartbeat("t", "g", "ann"); err != nil {
		t.Fatal(err)
	}
	if p := memberFetch(t, b, "t", "bob"); len(p.Records) != 0 {
		t.Fatalf("bob read %d records after ann's heartbeat: it released her ranges", len(p.Records))
	}
	if _, err := b.MemberHeartbeat("t", "g", "cyd"); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("heartbeat of a member that never joined: %v", err)
	}
	if _, err := b.MemberHeartbeat("missing", "g", "ann"); err == nil {
		t.Fatal("heartbeat on a missing topic succeeded")
	}
}

// TestMemberCommitRefusesStaleMember: a member's commit advances only the
// ranges it reads, and a member that left cannot commit at all.
func TestMemberCommitRefusesStaleMember(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	// Both members join before anything is produced, so each reads its
	// own share from the start.
	memberFetch(t, b, "t", "ann")
	memberFetch(t, b, "t", "bob")
	memberFetch(t, b, "t", "ann")
	memberFetch(t, b, "t", "bob")
	produceKeys(t, b, "t", 40)

	pa := memberFetch(t, b, "t", "ann")
	pb := memberFetch(t, b, "t", "bob")
	if len(pa.Records) == 0 || len(pb.Records) == 0 || len(pa.Records)+len(pb.Records) != 40 {
		t.Fatalf("ann read %d, bob %d of 40 records", len(pa.Records), len(pb.Records))
	}
	st, err := b.MemberHeartbeat("t", "g", "ann")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MemberCommit(ctx, "t", "g", "ann", st.Generation+1, *pa.Cursor); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a commit under a generation the group has not reached: %v", err)
	}
	if err := b.MemberCommit(ctx, "t", "g", "ann", st.Generation, *pa.Cursor); err != nil {
		t.Fatal(err)
	}
	// Ann's commit carried bob's ranges at their start: only hers moved.
	if g, err := b.DescribeGroup("t", "g"); err != nil || g.Lag != uint64(len(pb.Records)) {
		t.Fatalf("lag after ann's commit: %+v, %v; want bob's %d records", g, err, len(pb.Records))
	}
	// Bob leaves before he commits: his commit is refused and the group
	// stays where it was, so his records go to ann.
	bst, err := b.MemberHeartbeat("t", "g", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LeaveGroup("t", "g", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := b.MemberCommit(ctx, "t", "g", "bob", bst.Generation, *pb.Cursor); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("commit of a member that left: %v", err)
	}
	if g, err := b.DescribeGroup("t", "g"); err != nil || g.Lag != uint64(len(pb.Records)) {
		t.Fatalf("lag after bob's refused commit: %+v, %v; want %d", g, err, len(pb.Records))
	}
	if p := memberFetch(t, b, "t", "ann"); len(p.Records) != len(pb.Records) {
		t.Fatalf("ann read %d records once bob left, want his %d", len(p.Records), len(pb.Records))
	}
	if err := b.MemberCommit(ctx, "t", "g", "ann", st.Generation, "forged"); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("a forged cursor: %v", err)
	}
}
