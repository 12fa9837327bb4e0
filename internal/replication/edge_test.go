package replication

// Edge cases of the state machines that the table and model tests do not
// reach: windows under reordering, followers that come back with less,
// clocks that step back, and arguments outside what the Primary itself
// would produce. Each test names the invariant it guards.

import (
	"errors"
	"testing"
)

// sentBytes sums the batch bytes of out's Appends to node.
func sentBytes(out Output, node uint64) int {
	n := 0
	for _, m := range sendsTo(out, node) {
		n += len(m.Batches)
	}
	return n
}

// B1: "at most MaxInflightBytes are sent to a follower and not yet acked
// (one message always may be)". With one message already in flight, the
// next one is sent whole even when it does not fit the room left, so two
// messages exceed the bound.
func TestEdgeInflightWindowHoldsWithTwoMessages(t *testing.T) {
	b := testBatch(t, 1)
	limit := len(b) + len(b)/2
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, MaxInflightBytes: limit})
	sent, msgs := 0, 0
	for range 2 {
		_, out := mustAppend(t, p, testBatch(t, 1), 0)
		sent += sentBytes(out, 2)
		msgs += len(sendsTo(out, 2))
	}
	if msgs > 1 && sent > limit {
		t.Fatalf("B1: %d messages of %d bytes in flight to one follower, window %d", msgs, sent, limit)
	}
}

// B1: a follower that receives a window out of order answers Behind to
// each message above its gap (reordering alone, no loss), and the primary
// resends the whole window for every one of them: the bytes in flight to
// that follower grow with the square of the window, far past
// MaxInflightBytes.
func TestEdgeReorderedWindowDoesNotMultiplyResends(t *testing.T) {
	b := testBatch(t, 1)
	window := 4 * len(b)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, MaxInflightBytes: window, MaxMessageBytes: len(b)})
	var first []Append
	for range 4 {
		_, out := mustAppend(t, p, testBatch(t, 1), 0)
		first = append(first, sendsTo(out, 2)...)
	}
	if len(first) != 4 {
		t.Fatalf("sent %d messages, want 4", len(first))
	}
	f := NewFollower(0, 0, 0)
	sent := 4 * len(b)
	// Messages 2, 3 and 4 overtake message 1.
	for _, m := range first[1:] {
		acc, err := f.Append(m)
		if err != nil {
			t.Fatal(err)
		}
		bh, ok := acc.Reply.(Behind)
		if !ok {
			t.Fatalf("reply %#v, want Behind", acc.Reply)
		}
		sent += sentBytes(p.Behind(2, bh.Has, 0), 2)
	}
	if sent > 2*window {
		t.Fatalf("B1: %d bytes sent to one follower and not acked, window %d", sent, window)
	}
}

// B1: a Read marks the follower as reading, but each further Behind (a
// reordered window yields several) drops the mark and asks for another
// store read from the same place while the first is still outstanding.
func TestEdgeOneStoreReadPerFollower(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: len(b)})
	for i := range 3 {
		mustAppend(t, p, testBatch(t, 1), 0)
		p.LocalSynced(uint64(i+1), 0)
		p.Acked(2, uint64(i+1), 0)
	}
	reads := 0
	for range 5 { // the same Behind, delivered five times
		reads += len(p.Behind(3, 0, 0).Reads)
	}
	if reads > 1 {
		t.Fatalf("B1: %d store reads outstanding for one follower", reads)
	}
}

// Liveness and B1: a follower whose copy came back with less than it
// acked (its disk was replaced, or lost fsynced data) answers Behind(has)
// to everything; the primary resends from the old ack, never from has,
// so the two exchange messages without end, with no timer between them,
// and the copy never catches up. The primary also keeps counting the
// lost bytes as that follower's vote.
func TestEdgeFollowerBackWithLessCatchesUp(t *testing.T) {
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}})
	_, out := mustAppend(t, p, testBatch(t, 1), 0)
	f := NewFollower(0, 0, 0)
	if _, err := f.Append(sendsTo(out, 2)[0]); err != nil {
		t.Fatal(err)
	}
	p.Acked(2, f.Synced(1).(Ack).End, 0)

	f = NewFollower(0, 0, 0) // back with an empty copy
	_, out = mustAppend(t, p, testBatch(t, 1), 0)
	msgs := sendsTo(out, 2)
	rounds := 0
	for ; rounds < 50 && len(msgs) > 0 && f.End() < p.End(); rounds++ {
		var next []Append
		for _, m := range msgs {
			acc, err := f.Append(m)
			if err != nil {
				t.Fatal(err)
			}
			if bh, ok := acc.Reply.(Behind); ok {
				next = append(next, sendsTo(p.Behind(2, bh.Has, 0), 2)...)
			}
			if len(acc.Write) > 0 {
				if ack, ok := f.Synced(acc.Span.End).(Ack); ok {
					next = append(next, sendsTo(p.Acked(2, ack.End, 0), 2)...)
				}
			}
		}
		msgs = next
	}
	if f.End() < p.End() {
		t.Fatalf("after %d Behind/Append round trips the copy holds [0, %d) of [0, %d)", rounds, f.End(), p.End())
	}
}

// W6: FailoverEnd takes the quorum as an argument and accepts any value up
// to the replica count, but a Primary always commits on a majority. Given
// a quorum above the majority it asks for too few answers and seals below
// an acknowledged record.
func TestEdgeFailoverEndRefusesQuorumAboveMajority(t *testing.T) {
	replicas := []uint64{1, 2, 3}
	p := newPrimary(t, Config{Replicas: replicas})
	mustAppend(t, p, testBatch(t, 3), 0)
	p.LocalSynced(3, 0)
	committed := p.Acked(3, 3, 0).Committed // primary and follower 3
	if len(committed) != 1 {
		t.Fatalf("committed %v", committed)
	}
	// The primary dies; follower 2, which never got the batch, answers.
	fo, ok, err := FailoverEnd(replicas, len(replicas), []Answer{{Node: 2, End: 0}})
	if err == nil && ok && fo.End < committed[0].End {
		t.Fatalf("W6: sealed at %d, below the acknowledged end %d", fo.End, committed[0].End)
	}
}

// R1, W6: the learned watermark lives only in memory and NewFollower
// starts it at the base, so a copy that restarts serves less than it
// served before, and Truncate then accepts a seal below records this copy
// learned were acknowledged; the guard against cutting them is gone. The
// caller keeps the watermark and restarts the copy with RestoreFollower.
func TestEdgeRestartedFollowerKeepsLearnedWatermark(t *testing.T) {
	f := NewFollower(1, 0, 0)
	if _, err := f.Append(Append{Segment: 1, Base: 0, End: 3, Batches: run(t, 0, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	f.Synced(3)
	if _, err := f.Append(Append{Segment: 1, Base: 3, End: 3, Watermark: 3}); err != nil {
		t.Fatal(err)
	}
	learned := f.Watermark()

	f = RestoreFollower(1, 0, f.SyncedEnd(), learned) // a restart
	if f.Watermark() < learned {
		t.Errorf("R1: the copy's watermark went from %d to %d across a restart", learned, f.Watermark())
	}
	if tr, err := f.Truncate(1); !errors.Is(err, ErrBelowWatermark) {
		t.Fatalf("W6: a seal at 1 below the learned watermark %d was applied: %+v, %v", learned, tr, err)
	}
}

// The package doc says Decode checks an Append's batches for framing and
// offsets (each starts where the last ended, from Base to End); it does
// not, and decodes an Append whose Batches are not batches at all.
func TestEdgeDecodeChecksAppendFraming(t *testing.T) {
	for name, m := range map[string]Append{
		"no batches for five offsets": {Segment: 1, Base: 0, End: 5},
		"bytes that are no batch":     {Segment: 1, Base: 0, End: 5, Batches: []byte("not a batch")},
		"batches at the wrong base":   {Segment: 1, Base: 0, End: 1, Batches: run(t, 7, 1)},
	} {
		if got, err := Decode(Encode(m)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoded %+v, %v; want ErrMalformed", name, got, err)
		}
	}
}

// Liveness: Tick measures silence as now minus the last send. When the
// clock steps back (a wall clock adjusted), that difference stays negative
// until the clock passes the old time again, so a lost message is not
// sent again for as long as the step, whatever ResendAfter says.
func TestEdgeResendAfterClockStepsBack(t *testing.T) {
	const resend = 100
	p := newPrimary(t, Config{Replicas: []uint64{1, 2}, ResendAfter: resend})
	mustAppend(t, p, testBatch(t, 1), 1_000_000) // this send is lost
	resentAt := int64(-1)
	for now := int64(1_000); now <= 1_000+20*resend; now += resend / 2 { // the clock stepped back
		if len(sendsTo(p.Tick(now), 2)) > 0 {
			resentAt = now
			break
		}
	}
	if resentAt < 0 {
		t.Fatalf("nothing resent over %d ms of ticks after the clock stepped back (ResendAfter %d)", 20*resend, resend)
	}
}

// Liveness: an Ack that arrives while a store read for the same follower
// is outstanding moves where the follower stands, so the read is dropped
// when it returns, but the follower stays marked as reading: nothing more
// is sent to it, not even what the ack left missing, until Tick gives the
// read up after ResendAfter.
func TestEdgeAckDuringStoreReadKeepsFollowerFed(t *testing.T) {
	b := testBatch(t, 1)
	p := newPrimary(t, Config{Replicas: []uint64{1, 2, 3}, MaxRetainedBytes: len(b), ResendAfter: 1000})
	var stored []byte
	var toF3 []Append
	for i := range 2 {
		nb := testBatch(t, 1)
		_, out := mustAppend(t, p, nb, 0)
		stored = append(stored, nb...)
		toF3 = append(toF3, sendsTo(out, 3)...)
		p.LocalSynced(uint64(i+1), 0)
		p.Acked(2, uint64(i+1), 0)
	}
	f := NewFollower(0, 0, 0)
	// Batch 1 overtakes batch 0: Behind(0), and batch 0 is only in the store.
	acc, err := f.Append(toF3[1])
	if err != nil {
		t.Fatal(err)
	}
	out := p.Behind(3, acc.Reply.(Behind).Has, 1)
	if len(out.Reads) != 1 {
		t.Fatalf("behind below memory: %+v", out)
	}
	// Batch 0 arrives after all and is acked while the read is out.
	if _, err := f.Append(toF3[0]); err != nil {
		t.Fatal(err)
	}
	out = p.Acked(3, f.Synced(1).(Ack).End, 2)
	got := len(out.Sends) + len(out.Reads)
	rd, err := p.ReadDone(3, 0, stored, 3)
	if err != nil {
		t.Fatal(err)
	}
	got += len(sendsTo(rd, 3)) + len(rd.Reads)
	got += len(sendsTo(p.Tick(500), 3)) + len(p.Tick(500).Reads)
	if got == 0 {
		t.Fatalf("follower 3 holds [0, %d) of [0, %d) and nothing is sent or read for it before ResendAfter", f.End(), p.End())
	}
}

// S2, S4: a copy applies a seal, then is handed a different, lower one.
// Truncate keeps no record of the first seal and cuts records of a sealed
// copy, when two seals that disagree are an inconsistency to report.
func TestEdgeTruncateTwiceKeepsTheFirstSeal(t *testing.T) {
	f := NewFollower(1, 0, 0)
	if _, err := f.Append(Append{Segment: 1, Base: 0, End: 10, Batches: run(t, 0, 4, 2, 4)}); err != nil {
		t.Fatal(err)
	}
	f.Synced(10)
	if tr, err := f.Truncate(10); err != nil || tr != (Truncation{}) {
		t.Fatalf("seal at 10: %+v, %v", tr, err)
	}
	if tr, err := f.Truncate(6); err == nil {
		t.Fatalf("S2: a copy sealed at 10 was cut again at 6: %+v, now ends at %d", tr, f.End())
	}
}
