package broker

// Every way an open, a roll or a seal can be cut short, and what a restart
// finds afterwards: the range must keep taking writes, no acknowledged
// record may be lost, and no file may be adopted for a segment it was not
// made for.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// blockMetaSync returns a rule that parks every fsync of the metadata log
// until release is closed, signalling entered the first time.
func blockMetaSync(entered, release chan struct{}) vfs.Rule {
	var once sync.Once
	return func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/meta/") {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}
}

func mustProduce(t *testing.T, b *Broker, topic string, recs ...Record) {
	t.Helper()
	n, err := b.Produce(context.Background(), topic, recs)
	if err != nil || n != len(recs) {
		t.Fatalf("produce: %d, %v", n, err)
	}
}

func rec(key string, v int) Record {
	return Record{Key: []byte(key), Value: []byte(strconv.Itoa(v))}
}

// TestCancelledProduceDoesNotWedgeTheRange: the client's context ends while
// the open_segment command waits for its fsync. The open belongs to the
// broker and completes; the next produce works.
func TestCancelledProduceDoesNotWedgeTheRange(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "w", 8, 1); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	faulty.SetRule(blockMetaSync(entered, release))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Produce(ctx, "w", []Record{rec("k", 0)})
		errc <- err
	}()
	<-entered
	cancel()
	faulty.SetRule(nil)
	close(release)
	// The open is the broker's: it finishes whatever the client does. The
	// cancelled call may report success or its context's end.
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled produce: %v", err)
	}
	mustProduce(t, b, "w", rec("k", 1))
	r := newReader(t, b, "w")
	r.drain()
	// The cancelled record may or may not have been written; the acked one
	// must be there, after it if both are.
	if got := r.seen["k"]; len(got) == 0 || got[len(got)-1] != 1 {
		t.Fatalf("read %v, want the acknowledged 1 last", got)
	}
}

// TestRollCutBetweenStoreSealAndMetadataSeal: the store seals the segment
// and the process dies before the metadata records the seal. After the
// restart the range must take writes at once, continuing after the sealed
// end, not refuse them until the age roll.
func TestRollCutBetweenStoreSealAndMetadataSeal(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "r", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		mustProduce(t, b, "r", rec("k", i))
	}
	// The metadata log refuses the seal's write: the store has sealed the
	// segment, the metadata still calls it active.
	faulty.SetRule(vfs.FailOn(vfs.OpWrite, "/meta/", nil))
	if _, err := b.SplitRange(ctx, "r", 0); err == nil {
		t.Fatal("split succeeded with a failing metadata log")
	}
	killed := mem.Clone()
	b.Close()

	b = openOn(t, killed)
	defer b.Close()
	mustProduce(t, b, "r", rec("k", 5))
	r := newReader(t, b, "r")
	r.drain()
	if fmt.Sprint(r.seen["k"]) != "[0 1 2 3 4 5]" {
		t.Fatalf("read %v", r.seen["k"])
	}
}

// TestStoreSealedUnderLiveHead: a store segment sealed while its metadata
// stays active (what an interrupted DeleteTopic or roll leaves on a live
// node) makes the next produce finish the seal and open a successor.
func TestStoreSealedUnderLiveHead(t *testing.T) {
	b := openOn(t, vfs.NewMem())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "s", 8, 1); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "s", rec("k", 0))
	id := onlySegment(t, b)
	if _, err := b.store.Seal(ctx, storage.SegmentID(id)); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "s", rec("k", 1))
	r := newReader(t, b, "s")
	r.drain()
	if fmt.Sprint(r.seen["k"]) != "[0 1]" {
		t.Fatalf("read %v", r.seen["k"])
	}
}

// onlySegment returns the id of the one active segment of the broker.
func onlySegment(t *testing.T, b *Broker) uint64 {
	t.Helper()
	var ids []uint64
	for _, in := range b.store.List() {
		if !in.Sealed {
			ids = append(ids, uint64(in.ID))
		}
	}
	if len(ids) != 1 {
		t.Fatalf("active store segments: %v", ids)
	}
	return ids[0]
}

// TestDamagedActiveSegmentIsSealedAndSucceeded: a batch in the middle of
// the active segment is damaged on disk. After a restart the good prefix is
// readable, the damaged file is kept, and the range takes writes in a
// successor instead of refusing them forever.
func TestDamagedActiveSegmentIsSealedAndSucceeded(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "d", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustProduce(t, b, "d", rec("k", i))
	}
	id := onlySegment(t, b)
	b.Close()
	path := fmt.Sprintf("/data/segments/%020d.log", id)
	flipByteOfBatch(t, mem, path, 1) // the second of three batches

	b = openOn(t, mem)
	defer b.Close()
	mustProduce(t, b, "d", rec("k", 3))
	r := newReader(t, b, "d")
	r.drain()
	if fmt.Sprint(r.seen["k"]) != "[0 3]" {
		t.Fatalf("read %v, want the good prefix and the new record", r.seen["k"])
	}
	in, err := b.store.Info(storage.SegmentID(id))
	if err != nil || in.Damage == nil {
		t.Fatalf("the damaged segment must be kept and reported: %+v, %v", in, err)
	}
}

// flipByteOfBatch corrupts one byte inside the n-th batch of a segment file.
func flipByteOfBatch(t *testing.T, fs vfs.FS, path string, n int) {
	t.Helper()
	f, err := fs.OpenFile(path, 2 /* O_RDWR */, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	pos := int64(segment.FileHeaderSize)
	for i := 0; i < n; i++ {
		h, err := segment.ParseHeader(data[pos:])
		if err != nil {
			t.Fatal(err)
		}
		pos += int64(h.Length)
	}
	at := pos + segment.HeaderSize // a byte of the records, under the CRC
	if _, err := f.WriteAt([]byte{data[at] ^ 0xff}, at); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentIDsAreNotReused: a store file exists under an id the metadata
// has not handed out (its open_segment was lost). The next open must not
// take that id, the file must be kept, and the range must take writes.
func TestSegmentIDsAreNotReused(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	if err := b.CreateTopic(context.Background(), "i", 8, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	plantSegment(t, mem, 1, 0, 0, "stray")

	b = openOn(t, mem)
	defer b.Close()
	mustProduce(t, b, "i", rec("k", 0))
	r := newReader(t, b, "i")
	r.drain()
	if fmt.Sprint(r.seen) != "map[k:[0]]" {
		t.Fatalf("read %v", r.seen)
	}
	if in, err := b.store.Info(1); err != nil || in.Records != 1 {
		t.Fatalf("the stray segment must be kept: %+v, %v", in, err)
	}
}

// withStore runs fn on the node's segment store opened alone, as a tool
// that edits the data directory while the node is down would.
func withStore(t *testing.T, fs vfs.FS, fn func(st *storage.Store) error) {
	t.Helper()
	st, err := storage.Open(storage.Config{Dir: "/data/segments", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := fn(st); err != nil {
		t.Fatal(err)
	}
}

// plantSegment writes, with the store alone, an active segment id at base
// holding one record whose key is key, its header tagged owner.
func plantSegment(t *testing.T, fs vfs.FS, id, base uint64, owner uint32, key string) {
	t.Helper()
	withStore(t, fs, func(st *storage.Store) error {
		if err := st.CreateFor(storage.SegmentID(id), base, owner); err != nil {
			return err
		}
		batch, err := segment.EncodeBatch(nil, base, []Record{{Key: []byte(key), Value: []byte("666")}}, segment.CodecNone)
		if err != nil {
			return err
		}
		return st.Append(context.Background(), storage.SegmentID(id), batch)
	})
}

// deleteSegment removes segment id with the store alone.
func deleteSegment(t *testing.T, fs vfs.FS, id uint64) {
	t.Helper()
	withStore(t, fs, func(st *storage.Store) error { return st.Delete(storage.SegmentID(id)) })
}

// plantForeignActive creates topic with one acknowledged record in its
// active segment, stops the node, and replaces that segment's file with one
// made for another range (another owner tag) holding the key "foreign".
// It returns the segment id.
func plantForeignActive(t *testing.T, mem *vfs.MemFS, topic string) uint64 {
	t.Helper()
	b := openOn(t, mem)
	if err := b.CreateTopic(context.Background(), topic, 8, 1); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, topic, rec("k", 0))
	id := onlySegment(t, b)
	var rangeID uint64
	for r := range b.mu.heads {
		rangeID = r
	}
	b.Close()
	deleteSegment(t, mem, id)
	plantSegment(t, mem, id, 0, ownerTag(rangeID+100), "foreign")
	return id
}

// TestForeignActiveSegmentIsQuarantined: the file under the metadata's
// active segment id was made for another range. It is moved aside, never
// served as this topic's records, and the range goes on in a fresh file.
func TestForeignActiveSegmentIsQuarantined(t *testing.T) {
	mem := vfs.NewMem()
	plantForeignActive(t, mem, "q")

	b := openOn(t, mem)
	defer b.Close()
	mustProduce(t, b, "q", rec("k", 1))
	r := newReader(t, b, "q")
	r.drain()
	if _, ok := r.seen["foreign"]; ok {
		t.Fatalf("another range's record was served: %v", r.seen)
	}
	names, err := mem.ReadDir("/data/segments/" + storage.QuarantineDir)
	if err != nil || len(names) == 0 {
		t.Fatalf("quarantine holds %v (%v)", names, err)
	}
}

// TestMismatchedSealedSegmentIsQuarantined: a sealed segment's file ends
// elsewhere than the metadata's seal says. It is moved aside and reported,
// not served.
func TestMismatchedSealedSegmentIsQuarantined(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "m", 8, 1); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "m", rec("k", 0), rec("k", 1))
	id := onlySegment(t, b)
	if _, err := b.SplitRange(ctx, "m", 0); err != nil {
		t.Fatal(err)
	}
	b.Close()
	deleteSegment(t, mem, id)
	plantSegment(t, mem, id, 0, 0, "foreign")
	withStore(t, mem, func(st *storage.Store) error {
		_, err := st.Seal(ctx, storage.SegmentID(id))
		return err
	})

	b = openOn(t, mem)
	defer b.Close()
	if _, err := b.store.Info(storage.SegmentID(id)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the mismatched file is still in service: %v", err)
	}
	page, err := b.Fetch(ctx, FetchRequest{Topic: "m", Max: 100})
	if err == nil {
		for _, r := range page.Records {
			if string(r.Key) == "foreign" {
				t.Fatal("a mismatched sealed segment was served")
			}
		}
	}
}

// TestConcurrentFirstUseOfAHead: many producers reach a range whose head is
// not loaded yet (after a restart, with data already in it). None may see
// the head before it is loaded and assign offsets from 0.
func TestConcurrentFirstUseOfAHead(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	if err := b.CreateTopic(context.Background(), "c", 8, 1); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "c", rec("k", 0))
	for round := 0; round < 20; round++ {
		b.Close()
		b = openOn(t, mem)
		b.mu.Lock()
		clear(b.mu.heads) // as after a start that loaded nothing yet
		b.mu.Unlock()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for p := 0; p < 8; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.Produce(context.Background(), "c", []Record{rec(fmt.Sprintf("p%d", p), round)})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	b.Close()
}

// TestUnreadableActiveSegmentRefusesOnlyItsRange: an active segment whose
// header cannot be read stops writes to its range, with an error naming
// it, while the node starts and the topic's other ranges take writes.
func TestUnreadableActiveSegmentRefusesOnlyItsRange(t *testing.T) {
	mem := vfs.NewMem()
	b := openOn(t, mem)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "u", 8, 2); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "u", rec("a", 0))
	broken := onlySegment(t, b)
	groups, _, err := b.route("u", []Record{rec("a", 0)})
	if err != nil {
		t.Fatal(err)
	}
	brokenRange := groups[0].rangeID
	b.Close()
	f, err := mem.OpenFile(fmt.Sprintf("/data/segments/%020d.log", broken), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XXXX"), 0); err != nil { // the magic
		t.Fatal(err)
	}
	f.Sync()
	f.Close()

	b = openOn(t, mem)
	defer b.Close()
	_, err = b.Produce(ctx, "u", []Record{rec("a", 1)})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint("segment ", broken)) {
		t.Fatalf("produce to the broken range: %v", err)
	}
	for i := 0; i < 64; i++ { // some key of the other range
		k := fmt.Sprint("other-", i)
		g, _, _ := b.route("u", []Record{rec(k, 0)})
		if g[0].rangeID != brokenRange {
			mustProduce(t, b, "u", rec(k, 0))
			return
		}
	}
	t.Fatal("no key of the other range found")
}
