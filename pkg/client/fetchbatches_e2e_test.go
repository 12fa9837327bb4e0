package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestV2FetchBatches: FetchBatches reads the pages Fetch reads, and its
// lazy walk (Each) yields the same records as Fetch decodes, with their
// ranges, headers and timestamps; released pages leave later fetches
// intact; a positive Max is exact with wire v2.
func TestV2FetchBatches(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "lazy", client.WithRanges(2))
	const n = 2500
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: seqValue(i, 400)}
		if i%100 == 0 {
			recs[i].Headers = []client.Header{{Key: "i", Value: fmt.Append(nil, i)}, {Key: "nil"}}
		}
	}
	produce(t, c, "lazy", recs...)
	// Pages of about 100 KiB: large enough for released pages to be
	// reused by the next fetches.
	const pageBytes = 100 << 10
	want, _ := fetchAllV2(t, c, "lazy", "", pageBytes)
	if len(want) != n {
		t.Fatalf("Fetch read %d records, want %d", len(want), n)
	}

	var got []client.Record
	cursor := ""
	for pages := 0; len(got) < n; pages++ {
		if pages > n {
			t.Fatal("FetchBatches does not end")
		}
		bp, err := c.FetchBatches(t.Context(), "lazy", client.FetchOptions{Cursor: cursor, MaxBytes: pageBytes})
		if err != nil {
			t.Fatal(err)
		}
		before := len(got)
		err = bp.Each(func(r *client.Record) {
			// r and r.Headers are reused, and the page is released below:
			// keep copies.
			cp := *r
			cp.Key, cp.Value, cp.Headers = clone(r.Key), clone(r.Value), nil
			for _, h := range r.Headers {
				cp.Headers = append(cp.Headers, client.Header{Key: h.Key, Value: clone(h.Value)})
			}
			got = append(got, cp)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got)-before != bp.Len() || bp.Len() == 0 {
			t.Fatalf("page Len %d, Each walked %d records", bp.Len(), len(got)-before)
		}
		cursor = bp.Cursor
		bp.Release()
		if bp.Len() != 0 || bp.Cursor != cursor {
			t.Fatalf("released page: Len %d, cursor %q", bp.Len(), bp.Cursor)
		}
	}
	// Two reads may interleave the ranges differently; each range's
	// records come in the same order.
	byRange := func(recs []client.Record) map[uint64][]client.Record {
		m := map[uint64][]client.Record{}
		for _, r := range recs {
			m[r.Range] = append(m[r.Range], r)
		}
		return m
	}
	gotBy, wantBy := byRange(got), byRange(want)
	if len(gotBy) != len(wantBy) || gotBy[0] != nil {
		t.Fatalf("ranges read: %d by FetchBatches, %d by Fetch (range 0: %d records)", len(gotBy), len(wantBy), len(gotBy[0]))
	}
	for rng, w := range wantBy {
		g := gotBy[rng]
		if len(g) != len(w) {
			t.Fatalf("range %d: %d records, want %d", rng, len(g), len(w))
		}
		for i := range w {
			if err := sameRecord(g[i], w[i]); err != nil {
				t.Fatalf("range %d, record %d: %v", rng, i, err)
			}
		}
	}

	// Max is exact: pages of 1000, 1000 and 500 records, then none.
	cursor = ""
	for _, size := range []int{1000, 1000, 500, 0} {
		page, err := c.Fetch(t.Context(), "lazy", client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) != size {
			t.Fatalf("page of %d records with Max 1000, want %d", len(page.Records), size)
		}
		for _, r := range page.Records {
			if r.Range == 0 {
				t.Fatal("a Fetch with Max read a record without its range: not wire v2")
			}
		}
		cursor = page.Cursor
	}

	if _, err := c.FetchBatches(t.Context(), "no-such", client.FetchOptions{Max: 3}); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("FetchBatches of a missing topic: %v, want ErrNoSuchTopic", err)
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
