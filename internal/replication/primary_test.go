package replication

// Table tests of the Primary's transitions, driven through its methods
// with a manual now: offsets (W2), quorum arithmetic and the watermark
// (W1, R1), the fence, the windows (B1), and catch-up from memory, from
// the store and after silence.

import (
	"errors"
	"reflect"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
)

// testBatch encodes a batch of n records at base 0.
func testBatch(t *testing.T, n int) []byte {
	t.Helper()
	recs := make([]batch.Record, n)
	for i := range recs {
		recs[i] = batch.Record{Value: []byte("value")}
	}
	b, err := batch.EncodeBatch(nil, 0, recs, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newPrimary(t *testing.T, cfg Config) *Primary {
	t.Helper()
	if cfg.Replicas == nil {
		cfg.Replicas = []uint64{1, 2, 3}
	}
	p, err := NewPrimary(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustAppend(t *testing.T, p *Primary, b []byte, now int64) (uint64, Output) {
	t.Helper()
	base, out, err := p.Append(b, now)
	if err != nil {
		t.Fatal(err)
	}
	return base, out
}

func sendsTo(out Output, node uint64) []Append {
	var got []Append
	for _, s := range out.Sends {
		if s.To == node {
			got = append(got, s.Msg)
		}
	}
	return got
}

func TestQuorum(t *testing.T) {
	for rf, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 7: 4} {
		if got := Quorum(rf); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", rf, got, want)
		}
		if got := AnswersNeeded(rf, want); got+want != rf+1 {
			t.Errorf("AnswersNeeded(%d, %d) = %d: a quorum and the answers need not intersect", rf, want, got)
		}
	}
}

// The watermark is the end fsynced on a quorum, the primary's own fsync
// counted as one vote.
func TestWatermarkQuorum(t *testing.T) {
	cases := []struct {
		name  string
		rf    int
		local bool     // the primary fsynced
		acks  []uint64 // followers that acked
		want  uint64
	}{
		{"rf1 local", 1, true, nil, 3},
		{"rf1 nothing", 1, false, nil, 0},
		{"rf2 local only", 2, true, nil, 0},
		{"rf2 follower only", 2, false, []uint64{2}, 0},
		{"rf2 both", 2, true, []uint64{2}, 3},
		{"rf3 local only", 3, true, nil, 0},
		{"rf3 local and one", 3, true, []uint64{3}, 3},
		{"rf3 two followers, primary not synced", 3, false, []uint64{2, 3}, 3},
		{"rf3 one follower", 3, false, []uint64{2}, 0},
		{"rf5 local and one", 5, true, []uint64{4}, 0},
		{"rf5 local and two", 5, true, []uint64{2, 5}, 3},
		{"rf5 three followers", 5, false, []uint64{2, 3, 4}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			replicas := []uint64{1, 2, 3, 4, 5}[:c.rf]
			p := newPrimary(t, Config{Replicas: replicas})
			mustAppend(t, p, testBatch(t, 3), 0)
			var committed []Span
			if c.local {
				committed = append(committed, p.LocalSynced(3, 0).Committed...)
			}
			for _, n := range c.acks {
				committed = append(committed, p.Acked(n, 3, 0).Committed...)
			}
			if got := p.Watermark(); got != c.want {
				t.Fatalf("watermark %d, want %d", got, c.want)
			}
			if c.want == 3 && !reflect.DeepEqual(committed, []Span{{0, 3}}) || c.want == 0 && committed != nil {
				t.Fatalf("committed %v at watermark %d", committed, c.want)
			}
		})
	}
}

func TestAppendAssignsAndStampsOffsets(t *testing.T) {
	p := newPrimary(t, Config{Base: 100})
	var bases []uint64
	for _, n := range []int{2, 1, 5} {
		b := testBatch(t, n)
		base, out := mustAppend(t, p, b, 0)
		bases = append(bases, base)
		if h, _ := batch.ParseHeader(b); h.BaseOffset != base || batch.Verify(b) != nil {
			t.Fatalf("batch stamped at %d (verify %v), base %d", h.BaseOffset, batch.Verify(b), base)
		}
		for _, node := range []uint64{2, 3} {
			msgs := sendsTo(out, node)
			if len(msgs) != 1 || msgs[0].Base != base || msgs[0].End != base+uint64(n) || string(msgs[0].Batches) != string(b) {
				t.Fatalf("to %d: %+v", node, msgs)
			}
		}
	}
	if !reflect.DeepEqual(bases, []uint64{100, 102, 103}) || p.End() != 108 {
		t.Fatalf("bases %v, end %d", bases, p.End())
	}
	if _, _, err := p.Append(testBatch(t, 1)[:40], 0); err == nil {
		t.Fatal("a cut batch was appended")
	}
	if _, _, err := p.Append(append(testBatch(t, 1), 0), 0); !errors.Is(err, ErrBadRun) {
		t.Fatalf("a batch with a trailing byte: %v", err)
	}
}

func TestFence(t *testing.T) {
	p := newPrimary(t, Config{Base: 10})
	mustAppend(t, p, testBatch(t, 2), 0)
	if end := p.Fence(); end != 12 || !p.Fenced() || p.Drained() {
		t.Fatalf("fence answered %d, fenced %v, drained %v", end, p.Fenced(), p.Drained())
	}
	_, _, err := p.Append(testBatch(t, 1), 0)
	var sealed *SealedError
	if !errors.Is(err, ErrSealed) || !errors.As(err, &sealed) || sealed.End != 12 {
		t.Fatalf("append after the fence: %v", err)
	}
	if p.Fence() != 12 {
		t.Fatal("a second fence answered differently")
	}
	// What was appended before the fence still commits.
	p.LocalSynced(12, 0)
	out := p.Acked(2, 12, 0)
	if !reflect.DeepEqual(out.Committed, []Span{{10, 12}}) || !p.Drained() {
		t.Fatalf("after the fence: committed %v, drained %v", out.Committed, p.Drained())
	}
}

func TestBackpressureAndEviction(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: 2 * len(b)})
	mustAppend(t, p, testBatch(t, 1), 0)
	mustAppend(t, p, testBatch(t, 1), 0)
	if _, _, err := p.Append(testBatch(t, 1), 0); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("third append: %v, want ErrBackpressure", err)
	}
	if _, _, err := p.Append(testBatch(t, 10), 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("batch larger than the window: %v", err)
	}
	// Committed but not fsynced locally: still held.
	p.Acked(2, 1, 0)
	p.Acked(3, 1, 0)
	if _, _, err := p.Append(testBatch(t, 1), 0); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("append before the local fsync: %v", err)
	}
	p.LocalSynced(2, 0)
	if base, _ := mustAppend(t, p, testBatch(t, 1), 0); base != 2 {
		t.Fatalf("base %d", base)
	}
	if p.RetainedBytes() > 2*len(b) {
		t.Fatalf("%d bytes retained", p.RetainedBytes())
	}
}

func TestInflightWindow(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, MaxInflightBytes: len(b)})
	_, out := mustAppend(t, p, testBatch(t, 1), 0)
	if len(sendsTo(out, 2)) != 1 {
		t.Fatalf("first append: %+v", out.Sends)
	}
	_, out = mustAppend(t, p, testBatch(t, 1), 0)
	_, out2 := mustAppend(t, p, testBatch(t, 1), 0)
	if len(out.Sends)+len(out2.Sends) != 0 {
		t.Fatalf("sent past the window: %+v %+v", out.Sends, out2.Sends)
	}
	out = p.Acked(2, 1, 0)
	msgs := sendsTo(out, 2)
	if len(msgs) != 1 || msgs[0].Base != 1 || msgs[0].End != 2 {
		t.Fatalf("after the ack: %+v", msgs)
	}
}

func TestMessageBytesBound(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, MaxMessageBytes: 2 * len(b)})
	for range 5 {
		mustAppend(t, p, testBatch(t, 1), 0)
	}
	out := p.Behind(2, 0, 0) // everything again, from memory
	msgs := sendsTo(out, 2)
	if len(msgs) != 3 || msgs[0].End != 2 || msgs[1].End != 4 || msgs[2].End != 5 {
		t.Fatalf("resend in messages of at most 2 batches: %+v", msgs)
	}
	for _, m := range msgs {
		if len(m.Batches) > 2*len(b) {
			t.Fatalf("a message of %d bytes", len(m.Batches))
		}
	}
}

func TestBehindResendsFromMemory(t *testing.T) {
	p := newPrimary(t, Config{})
	mustAppend(t, p, testBatch(t, 2), 0)
	mustAppend(t, p, testBatch(t, 3), 0)
	out := p.Behind(2, 2, 0)
	msgs := sendsTo(out, 2)
	if len(msgs) != 1 || msgs[0].Base != 2 || msgs[0].End != 5 {
		t.Fatalf("behind at 2: %+v", out)
	}
	// A Behind below an ack resets the follower's vote and resends from
	// there: the follower may have come back with less than it acked.
	// One that has it all answers with an Ack of its fsynced end.
	p.LocalSynced(5, 0)
	p.Acked(3, 5, 0)
	out = p.Behind(3, 0, 0)
	if msgs := sendsTo(out, 3); len(msgs) != 1 || msgs[0].Base != 0 || msgs[0].End != 5 {
		t.Fatalf("behind below the ack: %+v", out.Sends)
	}
	if p.Watermark() != 5 {
		t.Fatalf("the watermark moved back to %d", p.Watermark())
	}
	// The same gap named again within ResendAfter is not sent again.
	if out := p.Behind(3, 0, DefaultResendAfter-1); len(out.Sends) != 0 {
		t.Fatalf("a repeated behind: %+v", out.Sends)
	}
	if out := p.Behind(3, 0, DefaultResendAfter); len(sendsTo(out, 3)) != 1 {
		t.Fatalf("a behind ResendAfter later: %+v", out.Sends)
	}
	if out := p.Behind(3, 99, 0); len(out.Sends) != 0 {
		t.Fatalf("behind above the end: %+v", out)
	}
	if out := p.Behind(9, 0, 0); len(out.Sends) != 0 {
		t.Fatalf("behind from a stranger: %+v", out)
	}
}

// W1: a follower that answers Behind below its ack lost what it acked; its
// vote must not count those bytes.
func TestBehindBelowAckResetsVote(t *testing.T) {
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}})
	mustAppend(t, p, testBatch(t, 1), 0)
	p.Acked(3, 1, 0)
	p.Behind(3, 0, 0) // back with an empty copy
	if out := p.LocalSynced(1, 0); p.Watermark() != 0 || len(out.Committed) != 0 {
		t.Fatalf("W1: committed %v at watermark %d with one copy fsynced", out.Committed, p.Watermark())
	}
	if out := p.Acked(3, 1, 0); p.Watermark() != 1 || len(out.Committed) != 1 {
		t.Fatalf("after the ack again: committed %v at watermark %d", out.Committed, p.Watermark())
	}
}

func TestBehindReadsFromStore(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: len(b)})
	var stored []byte
	for i := range 3 {
		_, _ = mustAppend(t, p, b, int64(i))
		stored = append(stored, b...)
		p.LocalSynced(uint64(i+1), 0)
		p.Acked(2, uint64(i+1), 0)
		b = testBatch(t, 1)
	}
	// Follower 3 has nothing, and only the last batch is held.
	out := p.Behind(3, 0, 0)
	want := []Read{{Node: 3, From: 0, To: 2, MaxBytes: DefaultMaxMessageBytes}}
	if !reflect.DeepEqual(out.Reads, want) || len(out.Sends) != 0 {
		t.Fatalf("behind below memory: %+v", out)
	}
	// A read for another position is dropped.
	if out, err := p.ReadDone(3, 1, stored[len(b):], 0); err != nil || len(out.Sends) != 0 {
		t.Fatalf("stale read: %+v %v", out, err)
	}
	out, err := p.ReadDone(3, 0, stored[:2*len(b)], 0)
	msgs := sendsTo(out, 3)
	if err != nil || len(msgs) != 2 || msgs[0].Base != 0 || msgs[0].End != 2 || msgs[1].Base != 2 || msgs[1].End != 3 {
		t.Fatalf("after the read: %+v, %v", out, err)
	}
	// A read that does not tile its offsets is refused. (The Behind comes
	// ResendAfter later: one from the same place sooner is answered by
	// the resend already made.)
	p.Behind(3, 0, DefaultResendAfter)
	if _, err := p.ReadDone(3, 0, stored[len(b):2*len(b)], 0); !errors.Is(err, ErrBadRun) {
		t.Fatalf("read starting at the wrong offset: %v", err)
	}
}

func TestTickResendsToSilentFollowers(t *testing.T) {
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, ResendAfter: 100})
	mustAppend(t, p, testBatch(t, 2), 0)
	p.Acked(3, 2, 50)
	if out := p.Tick(99); len(out.Sends) != 0 {
		t.Fatalf("tick before ResendAfter: %+v", out.Sends)
	}
	out := p.Tick(149)
	if msgs := sendsTo(out, 2); len(msgs) != 1 || msgs[0].Base != 0 || msgs[0].End != 2 {
		t.Fatalf("resend to the silent follower: %+v", out.Sends)
	}
	if msgs := sendsTo(out, 3); len(msgs) != 0 {
		t.Fatalf("resend to a follower heard from at 50: %+v", msgs)
	}
	// Follower 3 has everything; once quiet it is sent the watermark
	// again, once.
	p.LocalSynced(2, 150)
	out = p.Tick(300)
	if msgs := sendsTo(out, 3); len(msgs) != 1 || msgs[0].Watermark != 2 || len(msgs[0].Batches) != 0 {
		t.Fatalf("watermark repeat: %+v", out.Sends)
	}
	if msgs := sendsTo(p.Tick(500), 3); len(msgs) != 0 {
		t.Fatalf("watermark repeated twice: %+v", msgs)
	}
}

func TestAcksIgnoredWhenStale(t *testing.T) {
	p := newPrimary(t, Config{})
	mustAppend(t, p, testBatch(t, 4), 0)
	p.LocalSynced(4, 0)
	for _, a := range []struct{ node, end uint64 }{{9, 4}, {2, 5}, {2, 0}} {
		if out := p.Acked(a.node, a.end, 0); p.Watermark() != 0 || len(out.Committed) != 0 {
			t.Fatalf("ack %+v moved the watermark to %d", a, p.Watermark())
		}
	}
	p.Acked(2, 4, 0)
	if out := p.Acked(2, 4, 0); p.Watermark() != 4 || len(out.Committed) != 0 {
		t.Fatalf("a repeated ack: watermark %d, committed %v", p.Watermark(), out.Committed)
	}
}

// Once the watermark moves, followers that have every batch are sent it
// alone, so their readers see the commit.
func TestWatermarkReachesCaughtUpFollowers(t *testing.T) {
	p := newPrimary(t, Config{})
	mustAppend(t, p, testBatch(t, 1), 0)
	p.Acked(3, 1, 0)
	out := p.LocalSynced(1, 0)
	for _, node := range []uint64{2, 3} {
		msgs := sendsTo(out, node)
		if len(msgs) != 1 || msgs[0].Watermark != 1 || msgs[0].Base != msgs[0].End {
			t.Fatalf("to %d: %+v", node, msgs)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no replicas":   {},
		"too many":      {Replicas: make([]uint64, MaxReplicas+1)},
		"duplicate":     {Replicas: []uint64{1, 2, 1}},
		"negative":      {Replicas: []uint64{1}, MaxInflightBytes: -1},
		"huge messages": {Replicas: []uint64{1}, MaxMessageBytes: MaxAppendBytes + 1},
	} {
		if _, err := NewPrimary(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A batch that one Append cannot carry within the transport's frame is
// refused up front, not sent to followers that would refuse the frame.
func TestAppendRefusesBatchLargerThanFrame(t *testing.T) {
	const frame = 4096
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, MaxFrameBytes: frame})
	room := frame - AppendHeaderBytes - FrameOverheadBytes
	big := testBatch(t, room/6) // records of about 7 bytes each: more than room
	if len(big) <= room {
		t.Fatalf("test batch of %d bytes fits %d", len(big), room)
	}
	if _, _, err := p.Append(big, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a batch of %d bytes, frames of %d: %v", len(big), frame, err)
	}
	if p.End() != 0 || p.RetainedBytes() != 0 {
		t.Fatalf("a refused batch moved the end to %d, %d bytes held", p.End(), p.RetainedBytes())
	}
	small := testBatch(t, 1)
	_, out := mustAppend(t, p, small, 0)
	for _, s := range out.Sends {
		if n := len(Encode(s.Msg)) + FrameOverheadBytes; n > frame {
			t.Fatalf("a message of %d bytes with its frame header, frames of %d", n, frame)
		}
	}
}

func TestFrameConfig(t *testing.T) {
	if _, err := NewPrimary(Config{Replicas: []uint64{1}, MaxFrameBytes: 100}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("frames that hold no batch: %v", err)
	}
	if _, err := NewPrimary(Config{Replicas: []uint64{1}, MaxFrameBytes: 64 << 10, MaxMessageBytes: 1 << 20}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("messages larger than frames: %v", err)
	}
	// MaxMessageBytes left zero defaults to what fits.
	if _, err := NewPrimary(Config{Replicas: []uint64{1}, MaxFrameBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
}

// A primary answers a fence with everything it appended; the answer says
// so, and FailoverEnd does not count it.
func TestPrimaryFenceAnswer(t *testing.T) {
	p := newPrimary(t, Config{Segment: 4})
	mustAppend(t, p, testBatch(t, 3), 0)
	if a := p.FenceAnswer(); a != (FenceAnswer{Segment: 4, End: 3, Role: RolePrimary}) || !p.Fenced() {
		t.Fatalf("answer %+v, fenced %v", a, p.Fenced())
	}
}

// B1, liveness: an ack that lands while a store read is out keeps the
// read, and what it returns is shipped from where the follower now
// stands.
func TestReadDoneAfterFollowerMoved(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: len(b)})
	var stored []byte
	for i := range 3 {
		nb := testBatch(t, 1)
		mustAppend(t, p, nb, 0)
		stored = append(stored, nb...)
		p.LocalSynced(uint64(i+1), 0)
		p.Acked(2, uint64(i+1), 0)
	}
	if out := p.Behind(3, 0, 0); len(out.Reads) != 1 || out.Reads[0].To != 2 {
		t.Fatalf("behind below memory: %+v", out)
	}
	if out := p.Acked(3, 1, 0); len(out.Reads)+len(sendsTo(out, 3)) != 0 {
		t.Fatalf("a second read or a send while the read is out: %+v", out)
	}
	out, err := p.ReadDone(3, 0, stored[:2*len(b)], 0)
	msgs := sendsTo(out, 3)
	if err != nil || len(msgs) != 2 || msgs[0].Base != 1 || msgs[0].End != 2 || msgs[1].Base != 2 || msgs[1].End != 3 {
		t.Fatalf("after the read: %+v, %v", msgs, err)
	}
}

// B1: a store read whose first batch does not fit the room left in the
// window sends nothing and asks for no new read until the window drains.
func TestStoreReadWaitsForRoom(t *testing.T) {
	small, big := testBatch(t, 1), testBatch(t, 8)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: len(big), MaxInflightBytes: len(big)})
	var reads []Read
	for i, nb := range [][]byte{small, big, testBatch(t, 1)} {
		_, out := mustAppend(t, p, nb, 0)
		reads = append(reads, out.Reads...)
		end := uint64([]int{1, 9, 10}[i])
		p.LocalSynced(end, 0)
		p.Acked(2, end, 0)
	}
	// Follower 3 has the small batch in flight; the big one did not fit
	// beside it and has left memory since.
	if len(reads) != 1 || reads[0].Node != 3 || reads[0].From != 1 {
		t.Fatalf("reads %+v, want one for follower 3 from 1", reads)
	}
	out, err := p.ReadDone(3, 1, big, 0)
	if err != nil || len(out.Sends)+len(out.Reads) != 0 {
		t.Fatalf("sent past the window or read again: %+v, %v", out, err)
	}
	if out := p.Acked(2, 10, 0); len(out.Reads) != 0 {
		t.Fatalf("read again before the window drained: %+v", out.Reads)
	}
	out = p.Acked(3, 1, 0)
	if len(out.Reads) != 1 || out.Reads[0].From != 1 {
		t.Fatalf("after the window drained: %+v", out)
	}
	out, err = p.ReadDone(3, 1, big, 0)
	if msgs := sendsTo(out, 3); err != nil || len(msgs) != 1 || msgs[0].Base != 1 || msgs[0].End != 9 {
		t.Fatalf("the big batch alone in the window: %+v, %v", msgs, err)
	}
}

// W1, any quorum: two followers' fsyncs commit an append while the
// primary's own fsync is still pending; the primary is one voter among
// three, not a required one. The committed batch stays in memory until
// the local fsync (a follower that falls behind it is served from
// memory, never from a store read of bytes the local copy may not hold
// durable), the late local fsync commits nothing twice, and a fenced
// primary is drained on the followers' fsyncs alone.
func TestWatermarkAdvancesWhilePrimaryFsyncPending(t *testing.T) {
	b := testBatch(t, 3)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}})
	mustAppend(t, p, b, 0)
	if out := p.Acked(2, 3, 0); p.Watermark() != 0 || len(out.Committed) != 0 {
		t.Fatalf("one follower's fsync: watermark %d, committed %v", p.Watermark(), out.Committed)
	}
	out := p.Acked(3, 3, 0)
	if p.Watermark() != 3 || !reflect.DeepEqual(out.Committed, []Span{{0, 3}}) {
		t.Fatalf("two followers' fsyncs: watermark %d, committed %v; want 3, [{0 3}]", p.Watermark(), out.Committed)
	}
	if p.RetainedBytes() != len(b) {
		t.Fatalf("%d bytes retained before the local fsync, want %d", p.RetainedBytes(), len(b))
	}
	if out := p.Behind(3, 0, 0); len(out.Reads) != 0 || len(sendsTo(out, 3)) != 1 {
		t.Fatalf("a follower behind the committed batch: reads %v, sends %v; want one resend from memory", out.Reads, out.Sends)
	}
	if p.Fence() != 3 || !p.Drained() {
		t.Fatalf("fenced at %d, drained %v: want 3 and drained with the primary's fsync pending", p.End(), p.Drained())
	}
	if out := p.LocalSynced(3, 0); len(out.Committed) != 0 || p.Watermark() != 3 {
		t.Fatalf("the late local fsync: committed %v, watermark %d", out.Committed, p.Watermark())
	}
	p.Acked(3, 3, 0) // after the Behind above, node 3 acks again
	if p.RetainedBytes() != 0 {
		t.Fatalf("%d bytes retained once every replica fsynced", p.RetainedBytes())
	}
}
