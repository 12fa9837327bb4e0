package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// memberListed reports whether the node counts member in group.
func memberListed(t *testing.T, c *client.Client, topic, group, member string) bool {
	t.Helper()
	gm, err := c.DescribeGroupMembers(t.Context(), topic, group)
	if errors.Is(err, client.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("describe members of %s: %v", group, err)
	}
	for _, m := range gm.Members {
		if m.Name == member {
			return true
		}
	}
	return false
}

// TestConsumerCloseDuringFirstPollLeavesGroup: Close while the first
// fetch (the one that joins the group) is still waiting on the node must
// leave the group, as Close promises, so the member's slices pass to the
// others at once rather than after the group member timeout.
func TestConsumerCloseDuringFirstPollLeavesGroup(t *testing.T) {
	c, cs := startMember(t)
	polled := make(chan error, 1)
	go func() {
		_, err := cs.Poll(t.Context())
		polled <- err
	}()
	awaitCond(t, "the first fetch to join the member", func() bool {
		return memberListed(t, c, "orders", "g", "m")
	})
	if err := closeWithin(t, cs, 10*time.Second); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-polled; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("poll during close: %v, want ErrClosed", err)
	}
	if memberListed(t, c, "orders", "g", "m") {
		t.Fatal("the member is still in the group after Close returned: it never left")
	}
}

// TestConsumerCloseAfterCancelledFirstPollLeavesGroup: the usual
// shutdown of a consumer of an idle topic (its Poll's context ends, then
// Close) leaves the group too.
func TestConsumerCloseAfterCancelledFirstPollLeavesGroup(t *testing.T) {
	c, cs := startMember(t)
	pollCancelledOnce(t, cs, "the first fetch to join the member", func() bool {
		return memberListed(t, c, "orders", "g", "m")
	})
	if err := closeWithin(t, cs, 10*time.Second); err != nil {
		t.Fatalf("close: %v", err)
	}
	if memberListed(t, c, "orders", "g", "m") {
		t.Fatal("the member is still in the group after Close returned: it never left")
	}
}

// startMember starts a node with the topic orders of two ranges, and a
// consumer of it, member m of group g, that the test closes itself.
func startMember(t *testing.T) (*client.Client, *client.Consumer) {
	t.Helper()
	_, c := start(t)
	createTopic(t, c, "orders", client.WithRanges(2))
	cs, err := client.NewConsumer(c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "m", MaxWait: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// pollCancelledOnce runs one Poll of cs and cancels it once cond holds
// (the condition names what it waits for); the Poll must end cancelled.
func pollCancelledOnce(t *testing.T, cs *client.Consumer, what string, cond func() bool) {
	t.Helper()
	pctx, stop := context.WithCancel(t.Context())
	go func() {
		awaitCond(t, what, cond)
		stop()
	}()
	if _, err := cs.Poll(pctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll: %v, want cancelled", err)
	}
}

// closeWithin closes cs, giving it d.
func closeWithin(t *testing.T, cs *client.Consumer, d time.Duration) error {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return cs.Close(ctx)
}

// TestConsumerCommitFromOnRevokedReturns: committing in the revocation
// callback is what franz-go users do (OnPartitionsRevoked). Here the
// callback runs inside Close, under the lock Commit takes; the call must
// fail with an error rather than hang Close for good.
func TestConsumerCommitFromOnRevokedReturns(t *testing.T) {
	c := startTopic(t, "orders", keyedBy(5, 1, 0))
	var cs *client.Consumer
	commitErr := make(chan error, 1)
	cs, err := client.NewConsumer(c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "m", MaxWait: 200 * time.Millisecond,
		OnRevoked: func(client.Assignment) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			commitErr <- cs.Commit(ctx)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pollN(t, cs, 5)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- cs.Close(ctx)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs: Commit called from OnRevoked waits for the lock Close holds")
	}
	if err := <-commitErr; err == nil {
		t.Log("Commit from OnRevoked returned nil")
	}
}

// TestConsumerStartAtEndKeepsOtherMembersRecords: a member started with
// StartAtEnd joins a group whose first member (StartAtBeginning, the
// default) is reading but has not committed yet. The start position is
// for a group that has read nothing; it must not move the group past
// records the first member was given no chance to read.
func TestConsumerStartAtEndKeepsOtherMembersRecords(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "orders") // one range: one member reads it all
	const n = 100
	produce(t, c, "orders", keyedBy(n, 1, 0)...)
	first := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "first", MaxRecords: 10,
	})
	got := pollN(t, first, 10) // the first page, not committed yet
	late := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "late", Start: client.StartAtEnd(),
	})
	// The late member holds no range (first does); it only settles its
	// start and waits.
	pollNothing(t, late, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	for len(got) < n {
		p, err := first.Poll(ctx)
		if err != nil {
			t.Fatalf("the first member read %d of the %d records it started on, then: %v", len(got), n, err)
		}
		got = append(got, p.Records...)
	}
}

// TestConsumerCloseDoesNotWaitOutLongPoll: a consumer whose Poll was
// cancelled (a shutdown) leaves a fetch waiting on the node for up to
// MaxWait. Close, given less time than that, must still leave the group:
// it is what lets the member's slices pass to the others at once.
func TestConsumerCloseDoesNotWaitOutLongPoll(t *testing.T) {
	c := startTopic(t, "orders", keyedBy(1, 1, 0))
	cs, err := client.NewConsumer(c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "m", MaxWait: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	pollN(t, cs, 1)
	// The next Poll commits the page, then waits in a long poll.
	pollCancelledOnce(t, cs, "the page to be committed", func() bool { return groupLag(t, c, "orders", "g") == 0 })
	if err := closeWithin(t, cs, 2*time.Second); err != nil {
		t.Errorf("close within 2 s of a consumer with MaxWait 20 s: %v", err)
	}
	if memberListed(t, c, "orders", "g", "m") {
		t.Fatal("the member is still in the group after Close returned")
	}
}
