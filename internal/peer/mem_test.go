package peer

// The in-memory twin's controls: partitions, holding and releasing a
// link, a dropping filter, unreachable nodes, restarts, and the counters
// that report them.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// memCluster starts n in-memory transports that know each other, each
// with a one-way inbox on ChannelRaft and an echo on ChannelForward.
func memCluster(t *testing.T, n int) (*MemNetwork, []*MemTransport, []*inbox) {
	t.Helper()
	net := NewMemNetwork()
	var ts []*MemTransport
	var boxes []*inbox
	for i := 1; i <= n; i++ {
		tr, box := startMemNode(t, net, uint64(i))
		ts = append(ts, tr)
		boxes = append(boxes, box)
	}
	for _, a := range ts {
		for _, b := range ts {
			a.SetAddr(b.ID(), b.Addr())
		}
	}
	return net, ts, boxes
}

func startMemNode(t *testing.T, net *MemNetwork, id uint64) (*MemTransport, *inbox) {
	t.Helper()
	tr := net.Transport(id)
	box := newInbox()
	tr.Handle(ChannelRaft, box.handler(ChannelRaft))
	tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) { return req, nil })
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, box
}

func TestMemPartitionDropsBothWaysUntilHealed(t *testing.T) {
	net, ts, boxes := memCluster(t, 3)
	net.Partition(1, 2)
	for i := range 5 {
		sendRetrying(t, ts[0], 2, ChannelRaft, []byte{byte(i)})
		sendRetrying(t, ts[1], 1, ChannelRaft, []byte{byte(i)})
		sendRetrying(t, ts[0], 3, ChannelRaft, []byte{byte(i)})
	}
	waitFor(t, "node 3 to hear node 1", func() bool { return boxes[2].count(1, ChannelRaft) == 5 })
	waitFor(t, "the cut frames to be dropped", func() bool { return net.Counters().Dropped == 10 })
	if boxes[1].count(1, ChannelRaft) != 0 || boxes[0].count(2, ChannelRaft) != 0 {
		t.Fatal("frames crossed a partition")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ts[0].Call(ctx, 2, ChannelForward, []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call across a partition: %v", err)
	}
	net.Heal(1, 2)
	if resp, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("x")); err != nil || string(resp) != "x" {
		t.Fatalf("call after healing: %q %v", resp, err)
	}
}

func TestMemHoldKeepsOrderAndReleases(t *testing.T) {
	net, ts, boxes := memCluster(t, 2)
	net.Hold(1, 2)
	for i := range 10 {
		sendRetrying(t, ts[0], 2, ChannelRaft, []byte{byte(i)})
	}
	waitFor(t, "frames to be held", func() bool { return net.Counters().Held == 10 })
	if boxes[1].count(1, ChannelRaft) != 0 {
		t.Fatal("a held frame was delivered")
	}
	// A reply path is held only if its own direction is: node 2 still
	// reaches node 1.
	sendRetrying(t, ts[1], 1, ChannelRaft, []byte("back"))
	waitFor(t, "node 2's frame", func() bool { return boxes[0].count(2, ChannelRaft) == 1 })

	net.Release(1, 2)
	for i := 10; i < 20; i++ {
		sendRetrying(t, ts[0], 2, ChannelRaft, []byte{byte(i)})
	}
	waitFor(t, "all 20 frames", func() bool { return boxes[1].count(1, ChannelRaft) == 20 })
	for i, m := range boxes[1].get(1, ChannelRaft) {
		if m[0] != byte(i) {
			t.Fatalf("frame %d arrived as %d", i, m[0])
		}
	}
	if c := net.Counters(); c.Delivered < 21 || c.Dropped != 0 {
		t.Errorf("counters: %+v", c)
	}
}

func TestMemFilterDropsChosenFrames(t *testing.T) {
	net, ts, boxes := memCluster(t, 2)
	net.SetFilter(func(m MemMessage) bool { return m.Channel != ChannelRaft || m.Payload[0]%2 == 0 })
	for i := range 10 {
		sendRetrying(t, ts[0], 2, ChannelRaft, []byte{byte(i)})
	}
	if resp, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("call")); err != nil || string(resp) != "call" {
		t.Fatalf("call through the filter: %q %v", resp, err)
	}
	waitFor(t, "the even frames", func() bool { return boxes[1].count(1, ChannelRaft) == 5 })
	for i, m := range boxes[1].get(1, ChannelRaft) {
		if m[0] != byte(2*i) {
			t.Fatalf("frame %d is %d", i, m[0])
		}
	}
	if c := net.Counters(); c.Dropped != 5 {
		t.Errorf("dropped %d", c.Dropped)
	}
	net.SetFilter(nil)
}

func TestMemUnreachableAndRestart(t *testing.T) {
	net, ts, _ := memCluster(t, 2)
	ts[1].Close()
	if _, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("x")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call to a closed node: %v", err)
	}
	sendRetrying(t, ts[0], 2, ChannelRaft, []byte("lost"))
	waitFor(t, "the frame to count as unreachable", func() bool { return net.Counters().Unreachable == 2 })

	restarted, box := startMemNode(t, net, 2)
	restarted.SetAddr(1, ts[0].Addr())
	for i := range 5 {
		sendRetrying(t, ts[0], 2, ChannelRaft, []byte{byte(i)})
	}
	waitFor(t, "frames to the restarted node", func() bool { return box.count(1, ChannelRaft) == 5 })
	if resp, err := restarted.Call(context.Background(), 1, ChannelForward, []byte("back")); err != nil || string(resp) != "back" {
		t.Fatalf("call from the restarted node: %q %v", resp, err)
	}
	if err := net.Transport(1).Start(); err == nil {
		t.Error("a second transport took a live address")
	}
}

func TestMemStatsPerDestination(t *testing.T) {
	_, ts, boxes := memCluster(t, 3)
	for i := range 7 {
		sendRetrying(t, ts[0], 2, ChannelRaft, fmt.Appendf(nil, "%03d", i))
	}
	waitFor(t, "the frames", func() bool { return boxes[1].count(1, ChannelRaft) == 7 })
	st := ts[0].Stats().Nodes[2]
	if st.FramesSent != 7 || st.BytesSent != uint64(7*(headerSize+3)) || st.Writes == 0 {
		t.Errorf("sender's stats: %+v", st)
	}
	if got := ts[1].Stats().Nodes[1]; got.FramesReceived != 7 || got.BytesReceived != st.BytesSent {
		t.Errorf("receiver's stats: %+v", got)
	}
	if _, ok := ts[0].Stats().Nodes[3]; ok {
		t.Error("stats for a node never talked to")
	}
}
