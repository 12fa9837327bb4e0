package segment

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// benchSegmentBytes is the size of the segment the SeekTime benchmark
// searches: a full segment at the default roll size.
const benchSegmentBytes = 64 << 20

// benchSeekSegment writes a synced 64 MiB segment on the real file system
// (default index interval) of ~1 KiB batches whose timestamps rise by one
// per record with up to a second of jitter, so they are not monotonic. It
// returns the segment and its timestamps at 1%, 50% and 99% of the file.
func benchSeekSegment(b *testing.B) (*Segment, [3]int64) {
	b.Helper()
	s, err := Create(vfs.OS(), filepath.Join(b.TempDir(), "seg.log"), 1, 0, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]Record, 16)
	value := make([]byte, 40)
	var marks [3]int64
	var off uint64
	for pos := int64(0); pos < benchSegmentBytes; {
		for i := range recs {
			recs[i] = Record{Offset: off, Timestamp: int64(off) + rng.Int64N(1000), Value: value}
			off++
		}
		batch, err := EncodeBatchAt(nil, recs, CodecNone)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Append(batch); err != nil {
			b.Fatal(err)
		}
		for i, frac := range []int64{1, 50, 99} {
			if marks[i] == 0 && pos >= benchSegmentBytes*frac/100 {
				marks[i] = recs[0].Timestamp
			}
		}
		pos += int64(len(batch))
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	return s, marks
}

// BenchmarkSeekTime measures one SeekTime on a 64 MiB segment for a time
// first reached near its start, middle and end: "indexed" is SeekTime,
// "linear" the walk over every batch header it replaced.
func BenchmarkSeekTime(b *testing.B) {
	s, marks := benchSeekSegment(b)
	for _, impl := range []struct {
		name string
		seek func(*Segment, int64) (uint64, bool, error)
	}{{"indexed", (*Segment).SeekTime}, {"linear", seekTimeLinear}} {
		for i, at := range []string{"at1pct", "at50pct", "at99pct"} {
			b.Run(impl.name+"/"+at, func(b *testing.B) {
				for b.Loop() {
					if _, ok, err := impl.seek(s, marks[i]); !ok || err != nil {
						b.Fatalf("ok %v err %v", ok, err)
					}
				}
			})
		}
	}
}
