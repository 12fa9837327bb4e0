package replication

// Table tests of the Follower's transitions and of FailoverEnd.

import (
	"errors"
	"reflect"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
)

// run encodes batches of the given record counts at consecutive offsets
// from base, concatenated.
func run(t *testing.T, base uint64, counts ...int) []byte {
	t.Helper()
	var out []byte
	for _, n := range counts {
		b := testBatch(t, n)
		if err := batch.Restamp(b, base); err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		base += uint64(n)
	}
	return out
}

func TestFollowerAppend(t *testing.T) {
	cases := []struct {
		name      string
		has       uint64 // appended before, all synced unless unsynced
		unsynced  uint64 // appended but not synced on top of has
		msg       func(t *testing.T) Append
		wantWrite Span
		wantReply Message
		wantErr   error
	}{
		{"at the expected offset", 10, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 13, Batches: run(t, 10, 1, 2)} },
			Span{10, 13}, nil, nil},
		{"a gap", 10, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 12, End: 13, Batches: run(t, 12, 1)} },
			Span{}, Behind{Segment: 1, Has: 10}, nil},
		{"a gap seen by an empty append", 10, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 12, End: 12} },
			Span{}, Behind{Segment: 1, Has: 10}, nil},
		{"a repeat of fsynced batches", 13, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 13, Batches: run(t, 10, 1, 2)} },
			Span{}, Ack{Segment: 1, End: 13}, nil},
		{"a repeat of unsynced batches", 11, 2, func(t *testing.T) Append { return Append{Segment: 1, Base: 11, End: 13, Batches: run(t, 11, 2)} },
			Span{}, nil, nil},
		{"an overlap: only the new batches", 11, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 14, Batches: run(t, 10, 1, 3)} },
			Span{11, 14}, nil, nil},
		{"an overlap cutting a batch", 11, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 14, Batches: run(t, 10, 2, 2)} },
			Span{}, Behind{Segment: 1, Has: 11}, nil},
		{"another segment", 10, 0, func(t *testing.T) Append { return Append{Segment: 2, Base: 10, End: 10} },
			Span{}, nil, ErrWrongSegment},
		{"batches not at Base", 10, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 11, Batches: run(t, 11, 1)} },
			Span{}, nil, ErrBadRun},
		{"batches not ending at End", 10, 0, func(t *testing.T) Append { return Append{Segment: 1, Base: 10, End: 12, Batches: run(t, 10, 1)} },
			Span{}, nil, ErrBadRun},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewFollower(1, 0, c.has)
			if c.unsynced > 0 {
				if _, err := f.Append(Append{Segment: 1, Base: c.has, End: c.has + c.unsynced, Batches: run(t, c.has, int(c.unsynced))}); err != nil {
					t.Fatal(err)
				}
			}
			before := f.End()
			acc, err := f.Append(c.msg(t))
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if acc.Span != c.wantWrite || !reflect.DeepEqual(acc.Reply, c.wantReply) {
				t.Fatalf("wrote %v, replied %#v; want %v, %#v", acc.Span, acc.Reply, c.wantWrite, c.wantReply)
			}
			var written uint64
			for _, b := range acc.Write {
				written += spanOf(b)
			}
			if written != acc.Span.End-acc.Span.Base || f.End() != max(before, acc.Span.End) {
				t.Fatalf("wrote %d offsets for %v; end %d", written, acc.Span, f.End())
			}
		})
	}
}

func TestFollowerLearnsWatermark(t *testing.T) {
	f := NewFollower(1, 0, 0)
	for _, m := range []Append{{Segment: 1, Watermark: 5}, {Segment: 1, Watermark: 3}, {Segment: 1, Base: 9, End: 9, Watermark: 7}} {
		if _, err := f.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if f.Watermark() != 7 {
		t.Fatalf("watermark %d, want 7 (it only grows)", f.Watermark())
	}
}

func TestFollowerSyncedAcks(t *testing.T) {
	f := NewFollower(1, 0, 0)
	if _, err := f.Append(Append{Segment: 1, Base: 0, End: 3, Batches: run(t, 0, 3)}); err != nil {
		t.Fatal(err)
	}
	if got := f.Synced(3); got != (Ack{Segment: 1, End: 3}) {
		t.Fatalf("synced: %#v", got)
	}
	if got := f.Synced(3); got != nil {
		t.Fatalf("synced again: %#v", got)
	}
	if got := f.Synced(9); got != nil || f.SyncedEnd() != 3 {
		t.Fatalf("synced past what was appended: %#v, synced end %d", got, f.SyncedEnd())
	}
}

// A fenced copy answers its fsynced end, accepts nothing, and acks no
// fsync that completes afterwards (W4, W6).
func TestFollowerFence(t *testing.T) {
	f := NewFollower(1, 0, 0)
	if _, err := f.Append(Append{Segment: 1, Base: 0, End: 5, Batches: run(t, 0, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	f.Synced(2)
	if end := f.Fence(); end != 2 {
		t.Fatalf("fence answered %d, want the fsynced end 2 (appended %d)", end, f.End())
	}
	if ack := f.Synced(5); ack != nil {
		t.Fatalf("acked %#v after the fence", ack)
	}
	if end := f.Fence(); end != 2 {
		t.Fatalf("second fence answered %d", end)
	}
	acc, err := f.Append(Append{Segment: 1, Base: 5, End: 6, Batches: run(t, 5, 1)})
	if !errors.Is(err, ErrFenced) || acc.Write != nil || f.End() != 5 {
		t.Fatalf("append after the fence: %+v, %v", acc, err)
	}
}

func TestFollowerTruncate(t *testing.T) {
	cases := []struct {
		name     string
		has      uint64
		learned  uint64
		seal     uint64
		want     Truncation
		wantErr  error
		wantEnd  uint64
		wantSync uint64
	}{
		{"an unacknowledged suffix", 10, 4, 6, Truncation{Cut: true, At: 6}, nil, 6, 6},
		{"exactly at the seal", 10, 4, 10, Truncation{}, nil, 10, 10},
		{"short of the seal", 10, 4, 15, Truncation{Missing: Span{10, 15}}, nil, 10, 10},
		{"below the watermark", 10, 8, 6, Truncation{}, ErrBelowWatermark, 10, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewFollower(1, 0, c.has)
			if _, err := f.Append(Append{Segment: 1, Base: c.has, End: c.has, Watermark: c.learned}); err != nil {
				t.Fatal(err)
			}
			got, err := f.Truncate(c.seal)
			if !errors.Is(err, c.wantErr) || got != c.want {
				t.Fatalf("%+v, %v; want %+v, %v", got, err, c.want, c.wantErr)
			}
			if f.End() != c.wantEnd || f.SyncedEnd() != c.wantSync || f.Fenced() != (err == nil) {
				t.Fatalf("end %d synced %d fenced %v", f.End(), f.SyncedEnd(), f.Fenced())
			}
		})
	}
}

func TestFailoverEnd(t *testing.T) {
	three := []uint64{1, 2, 3}
	five := []uint64{1, 2, 3, 4, 5}
	cases := []struct {
		name     string
		replicas []uint64
		answers  []Answer
		wantOK   bool
		want     Failover
	}{
		{"rf1 no answer", []uint64{1}, nil, false, Failover{}},
		{"rf1 the restarted primary", []uint64{1}, []Answer{{Node: 1, End: 7}}, true, Failover{End: 7, Source: 1}},
		{"rf2 one follower", []uint64{1, 2}, []Answer{{Node: 2, End: 7}}, true, Failover{End: 7, Source: 2, Unknown: []uint64{1}}},
		{"rf3 one answer", three, []Answer{{Node: 2, End: 9}}, false, Failover{}},
		{"rf3 two answers", three, []Answer{{Node: 3, End: 9}, {Node: 2, End: 4}}, true, Failover{End: 9, Source: 3, Behind: []uint64{2}, Unknown: []uint64{1}}},
		{"rf3 equal answers: source in set order", three, []Answer{{Node: 3, End: 9}, {Node: 2, End: 9}}, true, Failover{End: 9, Source: 2, Unknown: []uint64{1}}},
		{"rf3 one node twice", three, []Answer{{Node: 2, End: 3}, {Node: 2, End: 9}}, false, Failover{}},
		{"rf5 two answers", five, []Answer{{Node: 2, End: 1}, {Node: 3, End: 2}}, false, Failover{}},
		{"rf5 three answers", five, []Answer{{Node: 2, End: 1}, {Node: 3, End: 2}, {Node: 5, End: 0}}, true, Failover{End: 2, Source: 3, Behind: []uint64{2, 5}, Unknown: []uint64{1, 4}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := FailoverEnd(c.replicas, Quorum(len(c.replicas)), c.answers)
			if err != nil || ok != c.wantOK || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%+v, %v, %v; want %+v, %v", got, ok, err, c.want, c.wantOK)
			}
		})
	}
	if _, _, err := FailoverEnd(three, 2, []Answer{{Node: 4, End: 1}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("an answer from a stranger: %v", err)
	}
	if _, _, err := FailoverEnd(three, 4, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a quorum above the set: %v", err)
	}
}

func TestFailoverEndIgnoresPrimaryAnswers(t *testing.T) {
	three := []uint64{1, 2, 3}
	live := Answer{Node: 1, End: 100, Role: RolePrimary}
	if _, ok, err := FailoverEnd(three, 2, []Answer{live, {Node: 2, End: 5}}); ok || err != nil {
		t.Fatalf("a live primary's answer counted: ok %v, %v", ok, err)
	}
	got, ok, err := FailoverEnd(three, 2, []Answer{live, {Node: 2, End: 5}, {Node: 3, End: 4}})
	want := Failover{End: 5, Source: 2, Behind: []uint64{3}, Unknown: []uint64{1}}
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, %v, %v; want %+v", got, ok, err, want)
	}
	for _, q := range []int{1, 3} {
		if _, _, err := FailoverEnd(three, q, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("quorum %d of 3: %v", q, err)
		}
	}
}

func TestFollowerFenceAnswerAndRestore(t *testing.T) {
	f := RestoreFollower(6, 10, 12, 30)
	if f.Watermark() != 30 || f.End() != 12 {
		t.Fatalf("restored: watermark %d, end %d", f.Watermark(), f.End())
	}
	if a := f.FenceAnswer(); a != (FenceAnswer{Segment: 6, End: 12, Role: RoleFollower}) || !f.Fenced() {
		t.Fatalf("answer %+v", a)
	}
	if f := RestoreFollower(6, 10, 0, 3); f.Watermark() != 10 || f.End() != 10 {
		t.Fatalf("restored below the base: watermark %d, end %d", f.Watermark(), f.End())
	}
}

// S2: the seal a copy applied is applied again as a no-op that still
// reports what is missing; another is refused and changes nothing.
func TestFollowerTruncateSameSealTwice(t *testing.T) {
	f := NewFollower(1, 0, 4)
	first, err := f.Truncate(6)
	if err != nil || first != (Truncation{Missing: Span{4, 6}}) {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if again, err := f.Truncate(6); err != nil || again != first {
		t.Fatalf("again: %+v, %v", again, err)
	}
	if tr, err := f.Truncate(9); !errors.Is(err, ErrSealConflict) || tr != (Truncation{}) || f.End() != 4 {
		t.Fatalf("another seal: %+v, %v, end %d", tr, err, f.End())
	}
}
