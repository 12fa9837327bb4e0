package raft

// The frame codec: what goes in comes out, heartbeats travel as compact
// records and come back as the messages raft expects, and a corrupt frame
// is refused without allocating what its counts claim.

import (
	"bytes"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestFrameRoundTrip(t *testing.T) {
	var b frameBuilder
	msgs := []struct {
		group uint64
		m     *pb.Message
	}{
		{7, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)), Commit: new(uint64(40))}},
		{9, &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(6))}},
		{9, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(6)), Context: []byte("read")}},
		{1 << 40, &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(10)),
			Entries: []*pb.Entry{{Index: new(uint64(11)), Term: new(uint64(3)), Data: []byte("x")}}}},
	}
	for _, m := range msgs {
		if _, err := b.add(m.group, m.m); err != nil {
			t.Fatal(err)
		}
	}
	f, err := decodeFrame(b.encode(1), testMaxEntries)
	if err != nil {
		t.Fatal(err)
	}
	if f.from != 1 || len(f.heartbeats) != 1 || len(f.responses) != 1 || len(f.messages) != 2 {
		t.Fatalf("decoded %+v", f)
	}
	hb := f.heartbeats[0].expand(pb.MsgHeartbeat, 1, 2)
	if f.heartbeats[0].group != 7 || !proto.Equal(hb, msgs[0].m) {
		t.Errorf("heartbeat came back as %v in group %d", hb, f.heartbeats[0].group)
	}
	resp := f.responses[0].expand(pb.MsgHeartbeatResp, 1, 2)
	if f.responses[0].group != 9 || !proto.Equal(resp, msgs[1].m) {
		t.Errorf("response came back as %v", resp)
	}
	for i, gm := range f.messages {
		want := msgs[i+2]
		m, err := gm.decode()
		if err != nil || gm.group != want.group || !proto.Equal(m, want.m) {
			t.Errorf("message %d: group %d %v (%v), want group %d %v", i, gm.group, m, err, want.group, want.m)
		}
	}
}

func TestFrameRefusesCorruption(t *testing.T) {
	var b frameBuilder
	if _, err := b.add(3, &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Entries: []*pb.Entry{{Data: bytes.Repeat([]byte("a"), 100)}}}); err != nil {
		t.Fatal(err)
	}
	good := b.encode(1)
	for _, bad := range [][]byte{
		nil,
		{2, 1, 0, 0, 0},                     // unknown version
		{frameVersion, 1, 0xff, 0xff, 0x0f}, // a count the bytes cannot hold
		good[:len(good)-1],                  // truncated
		append(bytes.Clone(good), 0),        // trailing byte
	} {
		if _, err := decodeFrame(bad, testMaxEntries); err == nil {
			t.Errorf("decoded corrupt frame %x", bad)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	var b frameBuilder
	_, _ = b.add(1, &pb.Message{Type: pb.MsgHeartbeat.Enum(), Term: new(uint64(2)), Commit: new(uint64(3))})
	_, _ = b.add(1, &pb.Message{Type: pb.MsgVote.Enum(), Term: new(uint64(2)), From: new(uint64(1)), To: new(uint64(2))})
	f.Add(b.encode(1))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeFrame(data, testMaxEntries)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to a frame that decodes alike.
		var rb frameBuilder
		for _, hb := range fr.heartbeats {
			_, _ = rb.add(hb.group, hb.expand(pb.MsgHeartbeat, fr.from, 0))
		}
		for _, hb := range fr.responses {
			_, _ = rb.add(hb.group, hb.expand(pb.MsgHeartbeatResp, fr.from, 0))
		}
		for _, gm := range fr.messages {
			m, err := gm.decode()
			if err != nil {
				continue // checked by scanMessage, refused when stepped
			}
			if _, err := rb.add(gm.group, m); err != nil {
				t.Fatal(err)
			}
		}
		again, err := decodeFrame(rb.encode(fr.from), testMaxEntries)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if len(again.heartbeats)+len(again.responses)+len(again.messages) < len(fr.heartbeats)+len(fr.responses)+len(fr.messages) {
			t.Fatal("records lost in re-encoding")
		}
	})
}

func TestEnvelopeRoundTrip(t *testing.T) {
	e := envelope{incarnation: 1<<63 | 5, seq: 300, payload: []byte("cmd")}
	got, err := decodeEnvelope(e.encode())
	if err != nil || got.incarnation != e.incarnation || got.seq != e.seq || !bytes.Equal(got.payload, e.payload) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := decodeEnvelope([]byte("plain")); err == nil {
		t.Fatal("decoded a payload without an envelope")
	}
}

// TestFrameBoundUnderLoad makes one cycle's appends overflow a frame: the
// host drops what does not fit rather than send a frame the receiver
// refuses, and raft resends it, so every proposal still commits.
func TestFrameBoundUnderLoad(t *testing.T) {
	n := newSim(t, 12, 3, func(o *Options) { o.MaxFrameBytes, o.MaxProposalBytes, o.MaxSizePerMsg = 8192, 2048, 2048 })
	groups := groupIDs(30)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	n.runUntil("leaders", 300, func() bool { return n.allHaveLeaders(groups) })
	// The node leading the most groups: at least 10 of 30 over 3 nodes,
	// whichever way the elections went.
	led := map[uint64]int{}
	for _, g := range groups {
		led[n.leader(g)]++
	}
	l := n.leader(1)
	for id, c := range led {
		if c > led[l] || c == led[l] && id < l {
			l = id
		}
	}
	var futures []*Future
	for _, g := range groups {
		if n.leader(g) != l {
			continue
		}
		f, err := n.hosts[l].ProposeAsync(g, putCmd("k", string(bytes.Repeat([]byte("x"), 1800))))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if len(futures) < 6 {
		t.Fatalf("node %d leads only %d groups; the test needs a frame's worth", l, len(futures))
	}
	n.runUntil("every proposal to commit", 200, func() bool {
		for _, f := range futures {
			select {
			case <-f.Done():
				if _, err := f.Result(); err != nil {
					t.Fatalf("proposal failed: %v", err)
				}
			default:
				return false
			}
		}
		return true
	})
	if n.hosts[l].Stats().DroppedOversize == 0 {
		t.Fatal("no message was held back by the frame bound; the test did not load a frame")
	}
	for _, id := range n.ids {
		if st := n.hosts[id].Stats(); st.BadFrames != 0 {
			t.Fatalf("node %d refused %d frames", id, st.BadFrames)
		}
	}
}
