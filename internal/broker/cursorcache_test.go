package broker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

func cacheCursor(topicID uint64, n int, offset uint64) cursor.Cursor {
	return cursor.Cursor{TopicID: topicID, Entries: cacheEntries(n, offset), Resume: offset + 1}
}

func cacheEntries(n int, offset uint64) []cursor.Entry {
	out := make([]cursor.Entry, n)
	for i := range out {
		out[i] = cursor.Entry{Source: uint64(i + 1), SliceBits: 64, Offset: offset}
	}
	return out
}

// held is the sum of the costs of what the cache holds, walked from its
// list, and the texts in its map; both must agree with its own count.
func held(t *testing.T, cc *cursorCache) (texts []string) {
	t.Helper()
	sum := 0
	for n := cc.head; n != nil; n = n.next {
		sum += n.size
		texts = append(texts, n.text)
	}
	if sum != cc.used || len(texts) != len(cc.byText) {
		t.Fatalf("the cache counts %d bytes and %d texts, holds %d and lists %d", cc.used, len(cc.byText), sum, len(texts))
	}
	return texts
}

func TestCursorCacheTakesOnceAndKeepsItsBound(t *testing.T) {
	one := cost("c0", cacheEntries(100, 0))
	cc := newCursorCache(5 * one)
	for i := range 8 {
		cc.put("c"+strconv.Itoa(i), cacheCursor(7, 100, uint64(i)))
		if cc.used > cc.max {
			t.Fatalf("after %d puts the cache holds %d bytes, bound %d", i+1, cc.used, cc.max)
		}
	}
	// The oldest left first.
	if got := held(t, cc); !slices.Equal(got, []string{"c3", "c4", "c5", "c6", "c7"}) {
		t.Fatalf("held %v, want the five newest", got)
	}
	if _, ok := cc.take(8, "c5"); ok {
		t.Fatal("a cursor of topic 7 was taken for topic 8")
	}
	got, ok := cc.take(7, "c5")
	if !ok || !slices.Equal(got.Entries, cacheEntries(100, 5)) || got.Resume != 6 || got.TopicID != 7 {
		t.Fatalf("take(c5) = %v, %+v", ok, got)
	}
	if cap(got.Entries) != len(got.Entries) {
		t.Fatalf("a hit's entries have room to append into: len %d cap %d", len(got.Entries), cap(got.Entries))
	}
	if _, ok := cc.take(7, "c5"); ok {
		t.Fatal("a cursor was taken twice")
	}
	// The same text again replaces, and is counted once.
	cc.put("c6", cacheCursor(7, 100, 60))
	if got := held(t, cc); !slices.Equal(got, []string{"c3", "c4", "c7", "c6"}) {
		t.Fatalf("held %v after c6 again", got)
	}
	if got, _ := cc.take(7, "c6"); got.Entries[0].Offset != 60 {
		t.Fatalf("c6 holds the old entries: offset %d", got.Entries[0].Offset)
	}
	// Not kept: few entries, not canonical, too large for a quarter.
	cc.put("small", cacheCursor(7, cursorCacheMinEntries-1, 0))
	unsorted := cacheCursor(7, 100, 0)
	unsorted.Entries[3], unsorted.Entries[4] = unsorted.Entries[4], unsorted.Entries[3]
	cc.put("unsorted", unsorted)
	dup := cacheCursor(7, 100, 0)
	dup.Entries[4] = dup.Entries[3]
	cc.put("dup", dup)
	cc.put("large", cacheCursor(7, 200, 0))
	for _, s := range []string{"small", "unsorted", "dup", "large"} {
		if _, ok := cc.take(7, s); ok {
			t.Errorf("%s was kept", s)
		}
	}
	// Entries in an array far larger than they are (a reader's entries
	// after a fold) are copied out rather than holding the array, and
	// are counted by what is held.
	roomy := cacheCursor(7, 100, 9)
	roomy.Entries = append(make([]cursor.Entry, 0, 1000), roomy.Entries...)
	cc.put("roomy", roomy)
	cc.mu.Lock()
	n := cc.byText["roomy"]
	cc.mu.Unlock()
	if n == nil || cap(n.c.Entries) != 100 || n.size != cost("roomy", cacheEntries(100, 0)) {
		t.Fatalf("held %+v", n)
	}
	held(t, cc)
}

// TestCursorsFromTheCacheReadAsDecoded pages through a topic of many
// ranges: every page's cursor is held, decoded entries and all, and a
// cursor read again once the cache has let it go gives the same page. A
// held cursor is still refused for another topic and when altered.
func TestCursorsFromTheCacheReadAsDecoded(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	for _, topic := range []string{"t", "u"} {
		if err := b.CreateTopic(ctx, topic, 16, 128); err != nil {
			t.Fatal(err)
		}
	}
	const records = 4000
	recs := make([]Record, records)
	for i := range recs {
		recs[i] = Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	if _, err := b.Produce(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	tID, _ := b.topicID("t")
	var cur *string
	seen, pages, heldPages, checked := map[string]int{}, 0, 0, false
	for {
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cur}, MaxBytes: 4 << 10})
		if err != nil {
			t.Fatal(err)
		}
		got := pageValues(t, p)
		p.Release()
		if len(got) == 0 {
			break
		}
		pages++
		for _, v := range got {
			seen[v]++
		}
		want, err := cursor.Decode(b.secret, tID, *p.Cursor)
		if err != nil {
			t.Fatal(err)
		}
		b.cursors.mu.Lock()
		n := b.cursors.byText[*p.Cursor]
		b.cursors.mu.Unlock()
		switch {
		case len(want.Entries) < cursorCacheMinEntries && n != nil:
			t.Fatalf("page %d: a cursor of %d entries is held", pages, len(want.Entries))
		case len(want.Entries) < cursorCacheMinEntries:
		case n == nil || !slices.Equal(n.c.Entries, want.Entries) || n.c.Resume != want.Resume:
			t.Fatalf("page %d: the cache holds %v for its cursor", pages, n)
		default:
			heldPages++
		}
		if heldPages == 2 && !checked {
			checked = true
			checkRefusals(t, b, *p.Cursor)
			again := readAgainUncached(t, b, *cur)
			if !slices.Equal(again, got) {
				t.Fatalf("page %d read again from a decoded cursor: %d records, want %d", pages, len(again), len(got))
			}
		}
		cur = p.Cursor
	}
	if heldPages < 4 || len(seen) != records {
		t.Fatalf("%d pages (%d cursors held) delivered %d of %d records", pages, heldPages, len(seen), records)
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("record %s delivered %d times", v, n)
		}
	}
	// A group's reader reads from the group's position again: its
	// page's cursor is not kept.
	b.cursors = newCursorCache(cursorCacheBytes) // the last page's cursor is held
	g := "g"
	p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Group: &g}, MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	b.cursors.mu.Lock()
	kept := len(b.cursors.byText)
	b.cursors.mu.Unlock()
	if kept != 0 {
		t.Fatal("a group read's cursor was kept")
	}
	// A reader that names a group beside its cursor reads by the cursor
	// and goes on from the page's: it is kept.
	p, err = b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Group: &g, Cursor: p.Cursor}, MaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	b.cursors.mu.Lock()
	n := b.cursors.byText[*p.Cursor]
	b.cursors.mu.Unlock()
	if n == nil {
		t.Fatal("the cursor of a page read by cursor, a group named, was not kept")
	}
}

func pageValues(t *testing.T, p BatchPage) []string {
	t.Helper()
	var out []string
	for _, rb := range p.Batches {
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// checkRefusals presents a held cursor for another topic, and altered.
func checkRefusals(t *testing.T, b *Broker, text string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "u", Cursor: &text}}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("topic t's cursor read topic u: %v", err)
	}
	altered := text[:len(text)-3] + string('A'+(text[len(text)-3]-'A'+1)%26) + text[len(text)-2:]
	if _, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: &altered}}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("an altered cursor read: %v", err)
	}
}

// readAgainUncached reads the page at text after making sure the cache
// no longer holds it, so the cursor is decoded.
func readAgainUncached(t *testing.T, b *Broker, text string) []string {
	t.Helper()
	tID, _ := b.topicID("t")
	b.cursors.take(tID, text)
	p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: &text}, MaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	return pageValues(t, p)
}
