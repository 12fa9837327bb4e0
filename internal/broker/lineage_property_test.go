package broker

// A property test of the promise ranges exist for. Random interleavings of
// produces, splits, merges and reads by three kinds of reader (from the
// start, holding a cursor, a group committing after every page), with
// random page sizes; at the end every reader must have seen every
// acknowledged record exactly once, every key in order. Runs on the
// in-memory filesystem so many cases fit in a few seconds.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

type propReader struct {
	cursor *string
	group  *string
	seen   map[string][]int
}

func (r *propReader) read(t *rapid.T, b *Broker, max int) bool {
	req := FetchRequest{Topic: "p", Cursor: r.cursor, Max: max}
	if r.group != nil {
		req = FetchRequest{Topic: "p", Group: r.group, Max: max}
	}
	p, err := b.Fetch(context.Background(), req)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	for _, rec := range p.Records {
		v, _ := strconv.Atoi(string(rec.Value))
		k := string(rec.Key)
		if s := r.seen[k]; len(s) > 0 && s[len(s)-1] >= v {
			t.Fatalf("key %s: %d after %d", k, v, s[len(s)-1])
		}
		r.seen[k] = append(r.seen[k], v)
	}
	if r.group != nil && len(p.Records) > 0 {
		if err := b.Commit(context.Background(), "p", *r.group, *p.Cursor); err != nil {
			t.Fatalf("commit: %v", err)
		}
	} else {
		r.cursor = p.Cursor
	}
	return len(p.Records) > 0
}

func TestLineageReadsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b, err := Open(context.Background(), Config{DataDir: "/d", FS: vfs.NewMem(), SegmentMaxBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx := context.Background()
		bits := uint8(rapid.IntRange(2, 8).Draw(t, "bits"))
		if err := b.CreateTopic(ctx, "p", bits, 1); err != nil {
			t.Fatal(err)
		}
		acked := map[string][]int{}
		next := map[string]int{}
		g := "g"
		readers := []*propReader{{seen: map[string][]int{}}, {seen: map[string][]int{}}, {group: &g, seen: map[string][]int{}}}
		keys := rapid.IntRange(1, 30).Draw(t, "keys")
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				var recs []Record
				for n := rapid.IntRange(1, 40).Draw(t, "n"); n > 0; n-- {
					k := fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key"))
					recs = append(recs, Record{Key: []byte(k), Value: []byte(strconv.Itoa(next[k]))})
					acked[k] = append(acked[k], next[k])
					next[k]++
				}
				if _, err := b.Produce(ctx, "p", recs); err != nil {
					t.Fatalf("produce: %v", err)
				}
			case 2:
				// With every range at one position, cannot_split is the answer.
				if _, err := b.SplitRange(ctx, "p", 0); err != nil && !errors.Is(err, metadata.ErrCannotSplit) {
					t.Fatalf("split: %v", err)
				}
			case 3:
				if err := mergeAny(b, "p"); err != nil && err.Error() != "no buddies to merge" {
					t.Fatalf("merge: %v", err)
				}
			default:
				r := readers[rapid.IntRange(0, len(readers)-1).Draw(t, "reader")]
				r.read(t, b, rapid.IntRange(1, 50).Draw(t, "max"))
			}
		}
		for i, r := range readers {
			for r.read(t, b, 1000) {
			}
			for k, want := range acked {
				if fmt.Sprint(r.seen[k]) != fmt.Sprint(want) {
					t.Fatalf("reader %d: key %s read %v, acked %v", i, k, r.seen[k], want)
				}
			}
		}
	})
}
