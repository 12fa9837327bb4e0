package raft

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestProposalFromPeerNotAppended sends the leader a MsgProp inside an
// ordinary frame from a follower. The host never forwards proposals
// (DisableProposalForwarding) and makes every proposal through
// ProposeAsync, which enforces MaxProposalBytes and MaxInflight; raft
// itself, though, appends a MsgProp stepped from any peer, so a peer (a
// misconfigured or older build with forwarding on, or a corrupted frame)
// could write entries, conf changes included, into any group it can
// reach, bypassing every bound. stepFrame steps only the message types
// peers send and counts the rest as dropped.
func TestProposalFromPeerNotAppended(t *testing.T) {
	n := newSim(t, 41, 3, nil)
	n.createGroup(1, n.ids)
	n.mustPropose(1, putCmd("a", "1"))
	l := n.leader(1)
	var f uint64
	for _, id := range n.ids {
		if id != l {
			f = id
			break
		}
	}
	data := envelope{incarnation: 12345, seq: 1, payload: putCmd("injected", "x")}.encode()
	msg := &pb.Message{Type: pb.MsgProp.Enum(), From: new(f), To: new(l), Entries: []*pb.Entry{{Data: data}}}
	var b frameBuilder
	if _, err := b.add(1, msg); err != nil {
		t.Fatal(err)
	}
	if err := n.hosts[l].Receive(f, b.encode(f)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		n.tick()
	}
	for _, id := range n.ids {
		if v, ok := n.sms[id][1].data["injected"]; ok {
			t.Fatalf("node %d applied a proposal stepped in from peer %d's frame (injected=%q)", id, f, v)
		}
	}
	if n.hosts[l].Stats().DroppedMessages == 0 {
		t.Fatal("the proposal was not counted as dropped")
	}
}
