package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// TestCursorFromEndHugeNReadsNothing: asking for more records than a
// topic's history could hold (any logged-in consumer may send N = 2^64-1)
// answers "from the start" without reading a segment, even after a split
// put the history in a sealed parent. Reads of segment files are made to
// fail, so any read would fail the call.
func TestCursorFromEndHugeNReadsNothing(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "e", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		mustProduce(t, b, "e", rec(fmt.Sprint("k", i), i))
	}
	if _, err := b.SplitRange(ctx, "e", 0); err != nil {
		t.Fatal(err)
	}
	mustProduce(t, b, "e", rec("k0", 20))
	faulty.SetRule(vfs.FailOn(vfs.OpRead, "/segments/", nil))
	if _, err := b.CursorFromEnd("e", ^uint64(0)); err != nil {
		t.Fatalf("huge N: %v", err)
	}
	faulty.SetRule(nil)
	cur, err := b.CursorFromEnd("e", ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, b, "e")
	r.cursor = &cur
	r.drain()
	n := 0
	for _, vs := range r.seen {
		n += len(vs)
	}
	if n != 21 {
		t.Fatalf("read %d records from a huge-N cursor, want all 21", n)
	}
}
