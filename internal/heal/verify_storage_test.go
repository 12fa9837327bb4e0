package heal_test

// Verify fed by storage's public read path, on a real directory: a sealed
// copy verifies whole against the footer the store wrote (the values the
// control plane records at seal), and after one byte in the middle of its
// file is flipped on disk the verdict names the damaged batch's offset.

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/storage"
)

func storeReader(s *storage.Store, id storage.SegmentID) heal.Reader {
	return func(from uint64, maxBytes int) ([]byte, error) {
		b, _, err := s.Read(id, from, maxBytes, math.MaxUint64)
		return b, err
	}
}

func sealFromFooter(id uint64, f storage.Footer) heal.Seal {
	return heal.Seal{Segment: id, Base: f.Base, End: f.End, Records: f.Records, Bytes: f.Bytes,
		ContentHash: f.ContentHash, Generation: f.Generation}
}

func TestVerifyStoredCopy(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := storage.Open(storage.Config{Dir: dir, NoJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	const id = 5
	if err := s.Create(id, 1000); err != nil {
		t.Fatal(err)
	}
	batches := copyOf(t, 1000, 4, 4, 4, 4, 4)
	for _, b := range batches {
		if err := s.Append(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	footer, err := s.Seal(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	seal := sealFromFooter(id, footer)
	if v := heal.Verify(seal, storeReader(s, id), 150); !v.Whole() || v.Records != 20 {
		t.Fatalf("the stored copy: %v", v)
	}

	// Flip one byte inside the third batch, on disk.
	path := filepath.Join(dir, "00000000000000000005.log")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	third := info.Size() - footer.Bytes + int64(2*len(batches[0])) + int64(len(batches[2])/2)
	flipByteOnDisk(t, path, third)
	v := heal.Verify(seal, storeReader(s, id), 150)
	if v.Outcome != heal.Damaged || v.At != 1008 || v.Records != 8 {
		t.Fatalf("after a flipped byte in the batch at 1008: %v", v)
	}
}

func flipByteOnDisk(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}
