package segment

import (
	"math"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A plan applies once, to the segment it was made for, and a fresh plan
// made after other cuts applies: the check follows the file's content,
// not a count that would refuse every later plan.
func TestCutPlanAppliesOnceToItsSegment(t *testing.T) {
	fs := vfs.NewMem()
	s := newSeg(t, fs, 0, Options{})
	appendSync(t, s, mkBatch(t, 0), mkBatch(t, 1), mkBatch(t, 2))
	c, err := s.PlanCut(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCut(c); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCut(c); err == nil {
		t.Fatal("a plan was applied twice")
	}

	other, err := Create(fs, "/other.log", 1, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	appendSync(t, other, mkBatch(t, 0), mkBatch(t, 1))
	if err := other.ApplyCut(func() Cut { c, _ := s.PlanCut(1); return c }()); err == nil {
		t.Fatal("a plan made for one segment was applied to another of the same size")
	}

	fresh, err := s.PlanCut(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCut(fresh); err != nil {
		t.Fatalf("a plan made after the last cut: %v", err)
	}
	if _, d := s.Stats(); d.End != 1 || d.Records != 1 {
		t.Fatalf("after cutting to 1: %+v", d)
	}
	appendSync(t, s, mkBatch(t, 1))
	buf, _, err := s.Read(0, math.MaxInt, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if got := offsetsOf(t, buf); len(got) != 2 || got[1] != 1 {
		t.Fatalf("after cutting and appending again: offsets %v", got)
	}
}
