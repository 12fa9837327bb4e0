package broker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// drainRecords reads the topic through nd as req until a page comes back empty,
// and returns how many records it read and the last cursor.
func drainRecords(t *testing.T, nd *clusterNode, req broker.FetchRequest) (int, string) {
	t.Helper()
	n, cur := 0, ""
	for {
		page, err := nd.b.Fetch(t.Context(), req)
		if err != nil {
			t.Fatalf("fetch through node %d: %v", nd.id, err)
		}
		if page.Cursor != nil {
			cur = *page.Cursor
			req.Cursor = page.Cursor
		}
		if len(page.Records) == 0 {
			return n, cur
		}
		n += len(page.Records)
		if req.Member != nil {
			// A member's next fetch starts from the group's commit; keep
			// the page's cursor as the reader of a plain fetch would.
			req.Member, req.Group = nil, nil
		}
	}
}

// stallRaft holds nd's raft log fsync from now on until the test ends,
// and waits until a metadata write through via has reached it.
func stallRaft(t *testing.T, faulty *vfs.FaultyFS, nd, via *clusterNode) {
	t.Helper()
	g := &gate{dir: filepath.Join(nd.dir, "raft"), open: make(chan struct{}), entered: make(chan struct{})}
	var reopen sync.Once
	t.Cleanup(func() { reopen.Do(func() { close(g.open) }) })
	faulty.SetRule(g.rule)
	go func() { _ = via.b.CreateTopic(context.Background(), inVnode0("stall-"+fmt.Sprint(nd.id)), 0, 1) }()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("node %d never synced its raft log", nd.id)
	}
}

// A range handed from one member to another starts, for the new holder,
// at the previous holder's last commit, even when the new holder polls
// through a node whose replica of the topic's vnode has not applied that
// commit: the coordinator, the vnode's leader, answers the committed
// position with the assignment.
func TestGroupsEdgeHandoffThroughALaggingReplicaStartsAtTheCommit(t *testing.T) {
	faulty := map[uint64]*vfs.FaultyFS{}
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		faulty[nd.id] = vfs.NewFaulty(vfs.OS(), nil)
		nd.fs = faulty[nd.id]
	})
	tc.waitVoters(3)
	ctx := t.Context()
	topic, _ := groupTopic(t, tc, "handoff")
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	var others []*clusterNode
	for _, nd := range tc.nodes {
		if nd != leader {
			others = append(others, nd)
		}
	}
	x, y := others[0], others[1]
	const records = 20
	for i := range records {
		if _, err := x.b.Produce(ctx, topic, []broker.Record{{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "every record readable through the lagging node", func() error {
		if n, _ := drainRecords(t, y, broker.FetchRequest{Topic: topic, Max: 100}); n != records {
			return fmt.Errorf("%d of %d records", n, records)
		}
		return nil
	})

	group, a, b := "g", "a", "b"
	n, cur := drainRecords(t, x, broker.FetchRequest{Topic: topic, Group: &group, Member: &a, Max: 100})
	if n != records {
		t.Fatalf("member a, alone, read %d records, want %d", n, records)
	}
	gen, _, err := x.b.MemberRanges(topic, group, a)
	if err != nil {
		t.Fatal(err)
	}

	stallRaft(t, faulty[y.id], y, x)
	if err := x.b.MemberCommit(ctx, topic, group, a, gen, cur); err != nil {
		t.Fatalf("a's commit while node %d's raft log stalls: %v", y.id, err)
	}
	if err := x.b.LeaveGroup(topic, group, a); err != nil {
		t.Fatal(err)
	}
	if lag, _ := drainRecords(t, y, broker.FetchRequest{Topic: topic, Group: &group, Max: 100}); lag == 0 {
		t.Fatalf("node %d's own view already has a's commit: the test needs it to lag", y.id)
	}
	again, _ := drainRecords(t, y, broker.FetchRequest{Topic: topic, Group: &group, Member: &b, Max: 100})
	if again != 0 {
		t.Errorf("member b, handed a's ranges through node %d, read %d records a had committed", y.id, again)
	}
}

// A subscription whose membership refresh is refused as busy (the node's
// group calls to the coordinator are all in flight) keeps its stream: it
// tries again and, once calls go through, delivers.
func TestGroupsEdgeSubscriptionOutlastsBusyRefresh(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitVoters(3)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	topic, _ := groupTopic(t, tc, "busy")
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	y := tc.nodes[0]
	if y == leader {
		y = tc.nodes[1]
	}
	group, member := "g", "m"
	sub, err := y.b.Subscribe(topic, &group, &member, 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.b.Produce(ctx, topic, []broker.Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	release := y.b.HoldGroupCalls(leader.id)
	defer release()
	if _, err := y.b.MemberHeartbeat(topic, group, member); !errors.Is(err, broker.ErrTooManyRequests) {
		t.Fatalf("heartbeat with every group call slot taken: %v, want too_many_requests", err)
	}
	refused := y.b.GroupCallsRefused()
	pages := make(chan broker.Page, 16)
	ended := make(chan error, 1)
	go func() {
		ended <- sub.Run(ctx, func(p broker.Page) error { pages <- p; return nil })
	}()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for y.b.GroupCallsRefused() < refused+2 { // refused, then tried again
		select {
		case err := <-ended:
			t.Fatalf("the subscription ended on a busy refresh: %v", err)
		case <-deadline:
			t.Fatal("the subscription never refreshed twice")
		case <-tick.C:
		}
	}
	release()
	for {
		select {
		case p := <-pages:
			if len(p.Records) > 0 {
				return
			}
		case err := <-ended:
			t.Fatalf("the subscription ended: %v", err)
		case <-deadline:
			t.Fatal("no record delivered once group calls went through")
		}
	}
}
