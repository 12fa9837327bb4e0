package segment

import (
	"math"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// batchOfLen is one batch at offset off whose encoding is exactly n bytes,
// padding its value; it fails the test when no padding reaches n.
func batchOfLen(t *testing.T, off uint64, n int) []byte {
	t.Helper()
	for pad := 0; pad < n; pad++ {
		b, err := EncodeBatchAt(nil, []Record{{Offset: off, Timestamp: 1, Value: []byte(strings.Repeat("x", pad))}}, CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == n {
			return b
		}
		if len(b) > n {
			break
		}
	}
	t.Fatalf("no batch at %d encodes to %d bytes", off, n)
	return nil
}

// A planned cut is refused once the segment was written since it was
// planned (ApplyCut's contract), even when other cuts and appends have
// brought the file back to the size the plan started from: the plan's
// index, counts and hash describe bytes the file no longer holds, and its
// position falls inside the batch now there. Applying it would leave the
// segment claiming a batch it does not hold and a file cut mid-batch,
// which a read or a seal then serves (S1, the footer's hash).
func TestEdgeStaleCutPlanRefused(t *testing.T) {
	fs := vfs.NewMem()
	s := newSeg(t, fs, 0, Options{})
	b1, b2 := mkBatch(t, 0), mkBatch(t, 1)
	appendSync(t, s, b1, b2)
	stale, err := s.PlanCut(1) // keep b1
	if err != nil {
		t.Fatal(err)
	}
	toBase, err := s.PlanCut(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCut(toBase); err != nil {
		t.Fatal(err)
	}
	// Written since the stale plan: one batch as long as b1 and b2 together.
	appendSync(t, s, batchOfLen(t, 0, len(b1)+len(b2)))
	if err := s.ApplyCut(stale); err == nil {
		_, d := s.Stats()
		_, _, rerr := s.Read(0, math.MaxInt, math.MaxUint64)
		t.Fatalf("a plan made before the segment was cut and written again was applied: "+
			"the segment now claims end %d and %d records; reading it: %v", d.End, d.Records, rerr)
	}
}
