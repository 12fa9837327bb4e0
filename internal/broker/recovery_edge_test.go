package broker

// Edge cases of recovery and reconciliation: a seal whose write failed
// after the fence, damage followed by valid batches, a create torn by a
// power loss, a foreign file the store sealed, and stray file names.

import (
	"context"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/vfs"
)

// TestFencedButUnsealedSegmentIsFinished: a roll whose store seal fails
// after the fence (a transient write fault on the .idx/.seal) leaves the
// segment fenced but not sealed; once the fault clears, the next produce
// must finish the seal and go on in a successor, not be refused until the
// age roll.
func TestFencedButUnsealedSegmentIsFinished(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "w", 8, 1); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "w", rec("k", 0))
	faulty.SetRule(vfs.FailOn(vfs.OpWrite, ".seal", nil))
	if _, err := b.SplitRange(ctx, "w", 0); err == nil {
		t.Fatal("split succeeded with a failing seal write")
	}
	faulty.SetRule(nil) // the fault was transient
	for i := 1; i < 4; i++ {
		n, err := b.Produce(ctx, "w", []Record{rec("k", i)})
		if err != nil || n != 1 {
			t.Fatalf("produce %d after a transient seal fault: %d, %v", i, n, err)
		}
	}
	r := newReader(t, b, "w")
	r.drain()
	if fmt.Sprint(r.seen["k"]) != "[0 1 2 3]" {
		t.Fatalf("read %v", r.seen["k"])
	}
}

// TestDamagedSegmentNeverReusesOffsets: a damaged active segment is sealed
// past every valid batch in its file, so no offset a reader may have seen
// is handed out again, and a group that committed past the damage receives
// every record acknowledged after the restart.
func TestDamagedSegmentNeverReusesOffsets(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "d", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustProduce(t, b, "d", rec("k", i))
	}
	g := "g"
	r := newReader(t, b, "d")
	r.group, r.commit = &g, true
	r.drain() // the group has read and committed 0,1,2 (position offset 3)
	id := onlySegment(t, b)
	b.Close()
	flipByteOfBatch(t, mem, fmt.Sprintf("/data/segments/%020d.log", id), 1)

	b = openOn(t, mem)
	defer b.Close()
	for i := 3; i < 6; i++ {
		mustProduce(t, b, "d", rec("k", i))
	}
	r = newReader(t, b, "d")
	r.group, r.commit = &g, true
	r.drain()
	if fmt.Sprint(r.seen["k"]) != "[3 4 5]" {
		t.Fatalf("group read %v after the restart, want the three records acknowledged since", r.seen["k"])
	}
}

// TestTornCreateDoesNotWedgeTheRange: a power loss while a segment's file
// is being created, after another range's create made its directory entry
// durable, leaves a header-sized file with a torn header. No append was
// ever acknowledged into it: recovery must treat it as an interrupted
// create, and the range must take writes. (Without the node journal,
// where a create fsyncs the file and the directory; with it, a create is a
// journal record and the replay recreates the file:
// storage.TestJournalCreateRecreatedAfterPowerLoss.)
func TestTornCreateDoesNotWedgeTheRange(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	openNoJournal := func(fs vfs.FS) *Broker {
		b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, SegmentMaxBytes: 2 << 10, NoJournal: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return b
	}
	b := openNoJournal(faulty)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	// Two keys, one per range.
	var k1, k2 string
	r1 := uint64(0)
	for i := 0; k2 == ""; i++ {
		k := fmt.Sprint("key-", i)
		groups, _, err := b.route("t", []Record{rec(k, 0)})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case k1 == "":
			k1, r1 = k, groups[0].rangeID
		case groups[0].rangeID != r1:
			k2 = k
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once = make(chan struct{}, 1)
	once <- struct{}{}
	faulty.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == fmt.Sprintf("/data/segments/%020d.log", 1) {
			select {
			case <-once:
				close(entered)
				<-release
			default:
			}
		}
		return nil
	})
	go b.Produce(ctx, "t", []Record{rec(k1, 0)}) // parks in segment 1's create, header unsynced
	<-entered
	mustProduce(t, b, "t", rec(k2, 0)) // segment 2's create syncs the directory
	lost := mem.CrashClone()
	// What PowerLoss leaves when it tears segment 1's header write with a
	// zero fill: its first bytes, then zeros.
	f, err := lost.OpenFile(fmt.Sprintf("/data/segments/%020d.log", 1), 2, 0)
	if err != nil {
		t.Fatalf("segment 1's entry is not durable: %v", err)
	}
	if _, err := f.WriteAt(append([]byte("MLOG\x01\x00\x00\x00\x01"), make([]byte, 23)...), 0); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()
	close(release)
	b.Close()

	b = openNoJournal(lost)
	defer b.Close()
	for i := 1; i < 3; i++ {
		if _, err := b.Produce(ctx, "t", []Record{rec(k1, i)}); err != nil {
			t.Fatalf("produce %d to the range whose create was torn: %v", i, err)
		}
	}
}

// TestForeignSealedSegmentIsNotAdopted: a foreign file under the
// metadata's active segment id that the store has sealed reports no owner
// from an open handle; its header must still be read, and the file
// quarantined rather than recorded as this range's sealed segment.
func TestForeignSealedSegmentIsNotAdopted(t *testing.T) {
	mem := vfs.NewMem()
	id := plantForeignActive(t, mem, "q")
	withStore(t, mem, func(st *storage.Store) error {
		_, err := st.Seal(context.Background(), storage.SegmentID(id))
		return err
	})

	b := openOn(t, mem)
	defer b.Close()
	mustProduce(t, b, "q", rec("k", 1))
	r := newReader(t, b, "q")
	r.drain()
	if _, ok := r.seen["foreign"]; ok {
		t.Fatalf("another range's record was adopted and served: %v", r.seen)
	}
}

// TestHugeStrayIDDoesNotStopOpens: a stray file named with an id at or
// above metadata.MaxSegmentID (even garbage: the store lists damaged files
// too) must not raise the id floor past what open_segment accepts.
func TestHugeStrayIDDoesNotStopOpens(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	if err := b.CreateTopic(context.Background(), "h", 8, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	f, err := mem.OpenFile("/data/segments/09223372036854775808.log", 0x40|2, 0o644) // O_CREATE|O_RDWR
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("not a segment, but named like one, 32+ bytes long....."), 0)
	f.Sync()
	f.Close()
	b = openOn(t, mem)
	defer b.Close()
	if _, err := b.Produce(context.Background(), "h", []Record{rec("k", 0)}); err != nil {
		t.Fatalf("produce with a stray file in the segment directory: %v", err)
	}
}
