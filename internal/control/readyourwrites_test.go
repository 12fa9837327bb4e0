package control

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
)

// TestApplyThroughFollowerWaitsForItsReplica: a write made through a
// follower of its group is visible in that follower's replica when Apply
// returns, even while the leader's raft traffic to the follower is being
// lost (the follower's replica then learns of the entry only once the
// traffic flows again, after the leader has already answered).
func TestApplyThroughFollowerWaitsForItsReplica(t *testing.T) {
	c := threeNodes(t, 2)
	const name = "own-write"
	g, err := c.node(1).GroupOfTopic(name)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.leaderOf(g)
	var follower uint64
	for _, id := range c.ids() {
		if id != leader {
			follower = id
			break
		}
	}
	var cut atomic.Bool
	cut.Store(true)
	c.net.SetFilter(func(m peer.MemMessage) bool {
		return !(cut.Load() && m.Channel == peer.ChannelRaft && m.From == leader && m.To == follower)
	})
	defer c.net.SetFilter(nil)

	type answer struct {
		res     metadata.Result
		err     error
		visible bool
	}
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := createTopic(name)
		cmd.V, cmd.Now = metadata.Version, c.clock.Now().UnixMilli()
		res, err := c.node(follower).Apply(ctx, cmd)
		_, visible := c.topicOn(follower, name)
		done <- answer{res, err, visible}
	}()
	c.waitFor("the leader applies the create", 2000, func() bool {
		_, ok := c.topicOn(leader, name)
		return ok
	})
	cut.Store(false)
	select {
	case a := <-done:
		if a.err != nil || a.res.Err != nil {
			t.Fatalf("create through follower %d: %v / %v", follower, a.err, a.res.Err)
		}
		if !a.visible {
			t.Fatalf("Apply through follower %d (leader %d) returned before its replica held the topic", follower, leader)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("Apply through follower %d did not return\n%s", follower, c.describe())
	}
}
