package broker

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// readCountFS counts the bytes read through ReadAt from the files it
// opens, and the reads: calls those of more than a batch header, headers
// those of one (Store.BatchHeaderAt).
type readCountFS struct {
	vfs.FS
	read, calls, headers atomic.Int64
}

type readCountFile struct {
	vfs.File
	fs *readCountFS
}

func (c *readCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &readCountFile{File: f, fs: c}, nil
}

func (f *readCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.read.Add(int64(n))
	if len(p) <= segment.HeaderSize {
		f.fs.headers.Add(1)
	} else {
		f.fs.calls.Add(1)
	}
	return n, err
}

// Batches larger than what a page has left are not read only to be left
// for a later page, range after range: a page over many ranges whose
// batches are each a large part of it reads about what it returns, holds
// every batch once, in order, and passes its byte bound by at most one
// batch.
func TestFetchBatchesLargeBatchesReadAboutWhatIsReturned(t *testing.T) {
	const (
		ranges   = 32
		rounds   = 3
		maxBytes = 1 << 20
	)
	fs, b, routes := countedReadsTopic(t, ranges, maxBytes)
	if len(routes) != ranges {
		t.Fatalf("%d routes, want %d", len(routes), ranges)
	}
	// About 200 KiB per batch: five fit a page, the other ranges' do not.
	stored := produceRounds(t, b, routes, rounds, func(int, int) int { return 200 << 10 })

	before := fs.read.Load()
	got := readAllBatches(t, b, stored, 4*ranges*rounds) // per range, the round of each batch taken
	for _, rr := range routes {
		if ts := got[rr.Range]; len(ts) != rounds || ts[0] != 0 || ts[1] != 1 || ts[2] != 2 {
			t.Fatalf("range %d: batches of rounds %v, want [0 1 2]", rr.Range, ts)
		}
	}
	// A page that read every other range's batch to leave it would read
	// several times what it returns.
	read := fs.read.Load() - before
	t.Logf("read %d bytes to return %d", read, stored)
	if read > 2*int64(stored) {
		t.Fatalf("read %d bytes to return %d", read, stored)
	}
}

// A range's read that stops short of its share stops at a batch that did
// not fit what is left of it: reading that batch again would only leave
// it for a later page. With small batches of mixed sizes over many ranges
// (most visits end so), every visit that takes batches costs one read of
// the store, and the pages still hold every record once, in order.
func TestFetchBatchesShareEndsWithoutReadingTheBatchLeft(t *testing.T) {
	const (
		ranges   = 32
		perRange = 60
		maxBytes = 256 << 10 // a share of 16 KiB per range
	)
	fs, b, routes := countedReadsTopic(t, ranges, maxBytes)
	ctx := context.Background()
	for i := 0; i < perRange; i++ {
		var batches []RangeBatch
		for k, rr := range routes {
			// 1 to 6 KiB, a different size per range and round.
			value := bytes.Repeat([]byte("v"), 1<<10*(1+(i*7+k*3)%6))
			batch, err := segment.EncodeBatch(nil, 0, []Record{{Value: value, Timestamp: int64(i)}}, segment.CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, RangeBatch{Range: rr.Range, Batch: batch})
		}
		if _, err := produceBatches(t, b, "t", batches); err != nil {
			t.Fatal(err)
		}
	}

	got := map[uint64][]int64{}
	var cursor *string
	for page := 0; page < 8; page++ { // every range still has records to read
		calls, headers := fs.calls.Load(), fs.headers.Load()
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}})
		if err != nil {
			t.Fatal(err)
		}
		calls, headers = fs.calls.Load()-calls, fs.headers.Load()-headers
		cursor = p.Cursor
		// Each visit appends its batches in one run.
		visits := 0
		for i, rb := range p.Batches {
			if i == 0 || p.Batches[i-1].Range != rb.Range {
				visits++
			}
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got[rb.Range] = append(got[rb.Range], r.Timestamp)
			}
		}
		if calls+headers > int64(visits) {
			t.Fatalf("page %d: %d reads of the store and %d of headers for %d visits of ranges", page, calls, headers, visits)
		}
	}
	for rr, ts := range got {
		for i, x := range ts {
			if x != int64(i) {
				t.Fatalf("range %d: records of rounds %v, want 0, 1, 2, ...", rr, ts)
			}
		}
	}
}

// countedReadsTopic opens a broker on an in-memory disk that counts its
// reads, with pages of at most maxBytes, and creates topic "t" of ranges
// ranges; the broker closes with the test.
func countedReadsTopic(t *testing.T, ranges, maxBytes int) (*readCountFS, *Broker, []RouteRange) {
	t.Helper()
	fs := &readCountFS{FS: vfs.NewMem()}
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, FetchMaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic(context.Background(), "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	return fs, b, routes
}

// A batch larger than what a range may still give the page is left
// without being read: the store's index and the batch's header say its
// size. Before, such a batch was read whole, and its CRC checked, only to
// be left for the next page: at one range, whose pages hold four batches
// of about 256 KiB, every page read a fifth in its second pass (a quarter
// more than it returned); over many ranges whose batches differ in size,
// a range's share or the page's last room often ended before a batch
// read to no end. Pages still hold every batch once, in order.
func TestFetchBatchesDoNotReadABatchTheyLeave(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ranges, rounds int
		size           func(round, k int) int // a batch's value bytes
	}{
		{"one range, four batches a page", 1, 12, func(int, int) int { return 255 << 10 }},
		{"many ranges, mixed sizes", 16, 6, func(round, k int) int { return (60 + (round*37+k*53)%190) << 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxBytes = 1 << 20
			fs, b, routes := countedReadsTopic(t, tc.ranges, maxBytes)
			stored := produceRounds(t, b, routes, tc.rounds, tc.size)
			before := fs.read.Load()
			got := readAllBatches(t, b, stored, tc.ranges*tc.rounds)
			for _, rr := range routes {
				ts := got[rr.Range]
				for i, x := range ts {
					if x != int64(i) {
						t.Fatalf("range %d: batches of rounds %v, want 0, 1, 2, ...", rr.Range, ts)
					}
				}
				if len(ts) != tc.rounds {
					t.Fatalf("range %d: %d batches, want %d", rr.Range, len(ts), tc.rounds)
				}
			}
			// Headers asked for, the index walk and reads that end less
			// than segment.TrimAtLeast into a batch aside, what is read is
			// what is returned (3.5% more here); reading whole batches
			// only to leave them read 17% more at one range and 10% more
			// over many.
			read := fs.read.Load() - before
			t.Logf("read %d bytes to return %d", read, stored)
			if read > int64(stored+stored/20) {
				t.Fatalf("read %d bytes to return %d: batches were read only to be left", read, stored)
			}
		})
	}
}

// produceRounds produces rounds rounds of one batch per range of topic
// "t", of one record stamped with its round, whose value has size(round,
// k) bytes for the k-th range; it returns the bytes stored.
func produceRounds(t *testing.T, b *Broker, routes []RouteRange, rounds int, size func(round, k int) int) int {
	t.Helper()
	stored := 0
	for round := 0; round < rounds; round++ {
		var batches []RangeBatch
		for k, rr := range routes {
			value := bytes.Repeat([]byte("v"), size(round, k))
			batch, err := segment.EncodeBatch(nil, 0, []Record{{Value: value, Timestamp: int64(round)}}, segment.CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			stored += len(batch)
			batches = append(batches, RangeBatch{Range: rr.Range, Batch: batch})
		}
		if _, err := produceBatches(t, b, "t", batches); err != nil {
			t.Fatal(err)
		}
	}
	return stored
}

// readAllBatches fetches topic "t" from its start until stored bytes of
// batches came back (in at most pages pages), checking each page's byte
// bound, and returns per range the timestamps of the records, in order.
func readAllBatches(t *testing.T, b *Broker, stored, pages int) map[uint64][]int64 {
	t.Helper()
	got := map[uint64][]int64{}
	var cursor *string
	for page, returned := 0, 0; returned < stored; page++ {
		if page > pages {
			t.Fatalf("%d pages returned %d of %d bytes", page, returned, stored)
		}
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		size, largest := 0, 0
		for _, rb := range p.Batches {
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got[rb.Range] = append(got[rb.Range], r.Timestamp)
			}
			size += len(rb.Batch)
			largest = max(largest, len(rb.Batch))
		}
		if size > b.cfg.FetchMaxBytes+largest {
			t.Fatalf("page %d: %d bytes, more than %d and one batch", page, size, b.cfg.FetchMaxBytes)
		}
		returned += size
		if returned > stored {
			t.Fatalf("returned %d bytes of %d stored", returned, stored)
		}
	}
	return got
}

// Pages fill up to their last batch whatever the batches' sizes, and
// hold every record once, in order: small batches between large ones,
// where a read may end early on an index boundary (segment.wholeEnd) and
// leave small batches that would fit, which the page then reads on for
// (nextWontFit asks the next batch's header).
func TestFetchBatchesMixedSizesFillPages(t *testing.T) {
	encode := func(size, stamp int) []byte {
		batch, err := segment.EncodeBatch(nil, 0, []Record{{Value: bytes.Repeat([]byte("v"), size), Timestamp: int64(stamp)}}, segment.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	// Groups of five small batches and a large one; a page has room for a
	// group, the next five small batches and 40 KiB, short of the next
	// large batch. Its read from the first small batch of the second
	// group ends early, at the last index boundary before the large one,
	// and leaves small batches that fit.
	small, large := len(encode(200, 0)), len(encode(60<<10, 0))
	maxBytes := 5*small + large + 5*small + 40<<10
	fs, b, routes := countedReadsTopic(t, 1, maxBytes)
	stored := 0
	for i := 0; i < 40; i++ {
		for k := 0; k < 6; k++ {
			size := 200
			if k == 5 {
				size = 60 << 10
			}
			batch := encode(size, i*6+k)
			stored += len(batch)
			if _, err := produceBatches(t, b, "t", []RangeBatch{{Range: routes[0].Range, Batch: batch}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, headers := fs.read.Load(), fs.headers.Load()
	p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rb := range p.Batches {
		n += len(rb.Batch)
	}
	if want := 5*small + large + 5*small; n != want {
		t.Fatalf("first page: %d bytes, want %d (a group and the next five small batches)", n, want)
	}
	// The page's checks of the batch after a read that stopped short of
	// its room (nextWontFit, then wontFit for the next visit: here the
	// first small batch of the second group, which the read of the first
	// group stopped at) are answered from the header that read had read,
	// with no read of their own; and the large batch that ends the
	// page is not read whole only to be left (that read about 188 KB).
	if got := fs.headers.Load() - headers; got != 0 {
		t.Fatalf("the first page read %d batch headers on their own; the read that stopped at the batch had it", got)
	}
	if read := fs.read.Load() - before; read >= int64(n+large+large/2) {
		t.Fatalf("the first page read %d bytes to return %d: the large batch that ends it was read only to be left", read, n)
	}
	readFullPages(t, b, stored, maxBytes-large)
}

// Batches smaller than the store's index interval fill pages: a read of
// them is never ended early on an index boundary (segment.TrimAtLeast),
// so a read that stops short did meet a batch too large for the page.
func TestFetchBatchesSmallBatchesFillPages(t *testing.T) {
	const maxBytes = 8000
	_, b, routes := countedReadsTopic(t, 1, maxBytes)
	value := bytes.Repeat([]byte("v"), 150)
	stored, size := 0, 0
	for i := 0; i < 400; i++ {
		batch, err := segment.EncodeBatch(nil, 0, []Record{{Value: value, Timestamp: int64(i)}}, segment.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		stored, size = stored+len(batch), len(batch)
		if _, err := produceBatches(t, b, "t", []RangeBatch{{Range: routes[0].Range, Batch: batch}}); err != nil {
			t.Fatal(err)
		}
	}
	readFullPages(t, b, stored, maxBytes-size+1)
}

// readFullPages fetches topic "t", one range whose records are stamped 0,
// 1, 2, ... in order, until stored bytes of batches came back, and fails
// unless the records come back once each, in order, and every page but
// the last holds at least minBytes.
func readFullPages(t *testing.T, b *Broker, stored, minBytes int) {
	t.Helper()
	var cursor *string
	next := int64(0)
	for page, returned := 0, 0; returned < stored; page++ {
		if page > stored/minBytes+1 {
			t.Fatalf("%d pages returned %d of %d bytes", page, returned, stored)
		}
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		n := 0
		for _, rb := range p.Batches {
			n += len(rb.Batch)
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Timestamp != next {
					t.Fatalf("page %d: record %d, want %d", page, r.Timestamp, next)
				}
				next++
			}
		}
		if returned+n < stored && n < minBytes {
			t.Fatalf("page %d: %d bytes, under %d with %d more stored after it", page, n, minBytes, stored-returned-n)
		}
		returned += n
	}
}
