package client_test

// End-to-end tests of positions by time and by count, across a split.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// stamped returns one record per key, all with timestamp ts; the value
// names the hour and the key so the test can tell records apart.
func stamped(ts time.Time, hour int, keys ...string) []client.Record {
	recs := make([]client.Record, len(keys))
	for i, k := range keys {
		recs[i] = client.Record{Key: []byte(k), Value: fmt.Appendf(nil, "h%d-%s", hour, k), Timestamp: ts}
	}
	return recs
}

// readAll fetches from cur until a page comes back empty and returns the
// values read.
func readAll(t *testing.T, c *client.Client, topic, cur string) []string {
	t.Helper()
	var out []string
	for {
		page, err := c.Fetch(t.Context(), topic, client.FetchOptions{Cursor: cur, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) == 0 {
			slices.Sort(out)
			return out
		}
		for _, r := range page.Records {
			out = append(out, string(r.Value))
		}
		cur = page.Cursor
	}
}

func hours(keys []string, hs ...int) []string {
	var out []string
	for _, h := range hs {
		for _, k := range keys {
			out = append(out, fmt.Sprintf("h%d-%s", h, k))
		}
	}
	slices.Sort(out)
	return out
}

// Records an hour apart, three hours in a parent range and two in its
// children after a split: a cursor for a time starts every range at the
// first record at or after it, through the parent and then the children.
func TestCursorAtTimeAcrossSplit(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "timed")
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	t0 := time.UnixMilli(1_700_000_000_000)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	for h := range 3 {
		produce(t, c, "timed", stamped(at(h), h, keys...)...)
	}
	children, err := c.SplitRange(t.Context(), "timed", 0)
	if err != nil || len(children) != 2 {
		t.Fatalf("split: %v %v", children, err)
	}
	for h := 3; h < 5; h++ {
		produce(t, c, "timed", stamped(at(h), h, keys...)...)
	}
	for _, tc := range []struct {
		name string
		at   time.Time
		want []int
	}{
		{"before everything", at(-1), []int{0, 1, 2, 3, 4}},
		{"exactly the second hour", at(1), []int{1, 2, 3, 4}},
		{"between hours in the parent", at(1).Add(30 * time.Minute), []int{2, 3, 4}},
		{"in the children", at(3).Add(-time.Millisecond), []int{3, 4}},
		{"the last hour", at(4), []int{4}},
		{"after everything", at(5), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, err := c.CursorAt(t.Context(), "timed", tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := readAll(t, c, "timed", cur), hours(keys, tc.want...); !slices.Equal(got, want) {
				t.Fatalf("from %v read %v, want %v", tc.at.Sub(t0), got, want)
			}
		})
	}
	// A cursor past the end still follows the topic: later records arrive.
	cur, err := c.CursorAt(t.Context(), "timed", at(5))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, c, "timed", stamped(at(6), 6, "a")...)
	if got := readAll(t, c, "timed", cur); !slices.Equal(got, []string{"h6-a"}) {
		t.Fatalf("after the end cursor read %v", got)
	}
}

// Records of one batch with different timestamps: the cursor lands on the
// exact record, not the batch's first.
func TestCursorAtTimeInsideBatch(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "batch")
	t0 := time.UnixMilli(1_700_000_000_000)
	recs := []client.Record{
		{Key: []byte("k"), Value: []byte("1"), Timestamp: t0},
		{Key: []byte("k"), Value: []byte("2"), Timestamp: t0.Add(time.Hour)},
		{Key: []byte("k"), Value: []byte("3"), Timestamp: t0.Add(2 * time.Hour)},
	}
	produce(t, c, "batch", recs...)
	cur, err := c.CursorAt(t.Context(), "batch", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c, "batch", cur); !slices.Equal(got, []string{"2", "3"}) {
		t.Fatalf("read %v, want [2 3]", got)
	}
	if _, err := c.CursorAt(t.Context(), "nope", t0); err == nil {
		t.Fatal("cursor of a missing topic: no error")
	}
}

// The last n records of each range, counted through a split parent.
func TestCursorFromEndAcrossSplit(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "last")
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	t0 := time.UnixMilli(1_700_000_000_000)
	produce(t, c, "last", stamped(t0, 0, keys...)...)
	if _, err := c.SplitRange(t.Context(), "last", 0); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "last", stamped(t0, 1, keys...)...)
	// The history length of each range, from an exact lag at the start.
	if err := c.SeekGroup(t.Context(), "last", "probe", ""); err != nil {
		t.Fatal(err)
	}
	g, err := c.DescribeGroup(t.Context(), "last", "probe")
	if err != nil || g.Lag != 16 || len(g.Ranges) != 2 {
		t.Fatalf("probe group: %+v, %v", g, err)
	}
	own := map[uint64]uint64{} // records each child holds itself: its share of hour 1
	for _, r := range g.Ranges {
		own[r.Range] = r.Lag / 2
	}
	for n := uint64(0); n <= 9; n++ {
		cur, err := c.CursorFromEnd(t.Context(), "last", n)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, c, "last", cur)
		var want int
		for _, r := range g.Ranges {
			want += int(min(n, r.Lag))
		}
		if len(got) != want {
			t.Fatalf("last %d: read %d records %v, want %d", n, len(got), got, want)
		}
		// Within a range's own records the newest come back: hour 1 only.
		var newest int
		for _, r := range g.Ranges {
			newest += int(min(n, own[r.Range]))
		}
		var hour1 int
		for _, v := range got {
			if v[:2] == "h1" {
				hour1++
			}
		}
		if hour1 != newest {
			t.Fatalf("last %d: %d records of hour 1 in %v, want %d", n, hour1, got, newest)
		}
	}
}
