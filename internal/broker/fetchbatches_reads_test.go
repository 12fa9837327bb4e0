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
// opens.
type readCountFS struct {
	vfs.FS
	read atomic.Int64
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
	fs := &readCountFS{FS: vfs.NewMem()}
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, FetchMaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	if len(routes) != ranges {
		t.Fatalf("%d routes, want %d", len(routes), ranges)
	}
	// About 200 KiB per batch: five fit a page, the other ranges' do not.
	value := bytes.Repeat([]byte("v"), 200<<10)
	stored := 0
	for round := 0; round < rounds; round++ {
		var batches []RangeBatch
		for _, rr := range routes {
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

	before := fs.read.Load()
	got := map[uint64][]int64{} // per range, the round of each batch taken
	var cursor *string
	returned := 0
	for page := 0; returned < stored; page++ {
		if page > 4*ranges*rounds {
			t.Fatalf("%d pages returned %d of %d bytes", page, returned, stored)
		}
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}})
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
		if size > maxBytes+largest {
			t.Fatalf("page %d: %d bytes, more than %d and one batch", page, size, maxBytes)
		}
		returned += size
	}
	if returned != stored {
		t.Fatalf("returned %d bytes of %d stored", returned, stored)
	}
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
