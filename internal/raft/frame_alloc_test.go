package raft

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// testMaxEntries is Options.MaxMessageEntries at the defaults.
const testMaxEntries = 32768

// allocatedBy returns the bytes allocated while fn runs.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// minimalMessage is the smallest message raft sends: type, to, from.
func minimalMessage() []byte { return []byte{0x08, byte(pb.MsgAppResp), 0x10, 2, 0x18, 1} }

func frameOf(records [][]byte) []byte {
	f := []byte{frameVersion}
	f = binary.AppendUvarint(f, 1) // from
	f = binary.AppendUvarint(f, 0) // heartbeats
	f = binary.AppendUvarint(f, 0) // responses
	f = binary.AppendUvarint(f, uint64(len(records)))
	for _, body := range records {
		f = binary.AppendUvarint(f, 1) // group
		f = binary.AppendUvarint(f, uint64(len(body)))
		f = append(f, body...)
	}
	return f
}

// TestDecodeFrameAllocationBounded decodes frames whose records are as
// small as the format allows: many empty messages, many minimal messages,
// and one message holding many empty entries. Decoding used to turn every
// two-byte record into a heap-allocated protobuf message of about two
// hundred bytes, so at the default MaxFrameBytes (16 MiB) and
// MaxPendingBytes (64 MiB) a peer (or a corrupted frame) could make a host
// allocate gigabytes. Whether the decoder refuses such a frame or keeps
// it, what it allocates must stay within 16 bytes per byte received (B1).
func TestDecodeFrameAllocationBounded(t *testing.T) {
	const frameBytes = 1 << 20
	const maxRatio = 16

	// Empty messages: refused, they lack type, receiver and sender.
	empty := make([][]byte, frameBytes/2)
	for i := range empty {
		empty[i] = []byte{}
	}
	// Minimal messages: kept, as bytes until stepped.
	minimal := make([][]byte, frameBytes/8)
	for i := range minimal {
		minimal[i] = minimalMessage()
	}
	// One MsgApp whose Entries field (7, bytes) repeats empty: refused,
	// over MaxMessageEntries.
	body := []byte{0x08, byte(pb.MsgApp), 0x10, 2, 0x18, 1}
	for len(body) < frameBytes-32 {
		body = append(body, 0x3a, 0)
	}

	for _, c := range []struct {
		name   string
		frame  []byte
		refuse bool
	}{
		{"empty messages", frameOf(empty), true},
		{"minimal messages", frameOf(minimal), false},
		{"empty entries", frameOf([][]byte{body}), true},
	} {
		var f frame
		var err error
		n := allocatedBy(func() { f, err = decodeFrame(c.frame, testMaxEntries) })
		if c.refuse && err == nil {
			t.Errorf("%s: decoded, want refused", c.name)
		}
		if !c.refuse && (err != nil || len(f.messages) != len(minimal)) {
			t.Errorf("%s: %d messages, %v; want %d", c.name, len(f.messages), err, len(minimal))
		}
		ratio := float64(n) / float64(len(c.frame))
		t.Logf("%s: %d-byte frame allocated %d bytes (%.1fx), err %v", c.name, len(c.frame), n, ratio, err)
		if ratio > maxRatio {
			t.Errorf("%s: decoding a %d-byte frame allocated %d bytes, %.0f times its size (a 16 MiB frame: about %d MiB)",
				c.name, len(c.frame), n, ratio, uint64(ratio*16))
		}
	}
}

// TestDecodeFrameEntryBound accepts a message with MaxMessageEntries
// entries and refuses one with one more.
func TestDecodeFrameEntryBound(t *testing.T) {
	const limit = 100
	msg := func(entries int) []byte {
		var b frameBuilder
		m := &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(1))}
		for i := range entries {
			m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: bytes.Repeat([]byte("x"), 10)})
		}
		if _, err := b.add(1, m); err != nil {
			t.Fatal(err)
		}
		return b.encode(1)
	}
	if f, err := decodeFrame(msg(limit), limit); err != nil || len(f.messages) != 1 {
		t.Fatalf("a message with %d entries: %v", limit, err)
	}
	if _, err := decodeFrame(msg(limit+1), limit); err == nil {
		t.Fatalf("a message with %d entries decoded, limit %d", limit+1, limit)
	}
}

// TestMaxMessageEntriesCoversFullAppends refuses options under which a
// full append message of small proposals would be refused by its
// receiver.
func TestMaxMessageEntriesCoversFullAppends(t *testing.T) {
	o := Options{NodeID: 1, LogStore: NewMemLogStore(), Sender: simSender{}, MaxSizePerMsg: 64 << 10, MaxMessageEntries: 100}
	if err := o.setDefaults(); err == nil {
		t.Fatal("MaxMessageEntries 100 with MaxSizePerMsg 64 KiB accepted")
	}
	o = Options{NodeID: 1, LogStore: NewMemLogStore(), Sender: simSender{}}
	if err := o.setDefaults(); err != nil || o.MaxMessageEntries != testMaxEntries {
		t.Fatalf("defaults: MaxMessageEntries %d, %v; want %d", o.MaxMessageEntries, err, testMaxEntries)
	}
}
