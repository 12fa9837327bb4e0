package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// countingFS counts the files open at once, and the most ever open.
type countingFS struct {
	vfs.FS
	mu         sync.Mutex
	open, peak int
}

type countedFile struct {
	vfs.File
	fs   *countingFS
	once sync.Once
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open++
	c.peak = max(c.peak, c.open)
	c.mu.Unlock()
	return &countedFile{File: f, fs: c}, nil
}

func (f *countedFile) Close() error {
	f.once.Do(func() {
		f.fs.mu.Lock()
		f.fs.open--
		f.fs.mu.Unlock()
	})
	return f.File.Close()
}

// TestOpenFilesBoundedByRangeQuota: every active range holds its active
// segment's file open, so a user who could create ranges without bound
// could open files without bound. The range quota bounds them: after a
// user creates all the topics it may, writes to every range, rolls and
// reads back, the files ever open at once stay within the ranges allowed,
// plus the sealed-file cache, the metadata log, the node journal's file and
// the sidecar a seal writes (produces here run one at a time, so one seal
// at a time).
func TestOpenFilesBoundedByRangeQuota(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	l := Limits{MaxRanges: 8, MaxRangesPerUser: 8, MaxOpenSealedFiles: 2}
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, SegmentMaxBytes: 1 << 10, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	var topics []string
	for i := 0; ; i++ {
		name := fmt.Sprint("t", i)
		err := b.CreateTopicAs(ctx, producerID, name, 8, 2)
		if errors.Is(err, ErrQuotaExceeded) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("create %d: %v", i, err)
		}
		topics = append(topics, name)
	}
	for round := range 8 { // several rolls of every range
		for _, topic := range topics {
			recs := make([]Record, 16)
			for i := range recs {
				recs[i] = Record{Key: []byte(fmt.Sprint(round, i)), Value: make([]byte, 100)}
			}
			if _, err := b.Produce(ctx, topic, recs); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, topic := range topics {
		if _, err := b.Fetch(ctx, FetchRequest{Topic: topic, Max: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	fs.mu.Lock()
	peak := fs.peak
	fs.mu.Unlock()
	if bound := l.MaxRanges + l.MaxOpenSealedFiles + 3; len(topics) != 4 || peak > bound {
		t.Fatalf("%d topics; %d files open at once, bound %d", len(topics), peak, bound)
	}
}
