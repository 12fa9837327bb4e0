package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// topic describe on a topic of a few thousand ranges: JSON lists every
// range once in id order (the node answers by pages), --active and
// --limit bound the listing, and the text starts with the summary, which
// counts every range.
func TestTopicDescribeLargeTopic(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "big", "--ranges", "1024", "--keyspace-bits", "20")
	admin := adminClient(t, n)
	d0, err := admin.DescribeTopic(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d0.Ranges[:600] {
		if _, err := admin.SplitRange(t.Context(), "big", r.ID); err != nil {
			t.Fatal(err)
		}
	}
	const total, active = 1024 + 2*600, 1024 + 600

	d := describe(t, c, "big")
	if len(d.Ranges) != total || d.RangesTotal != total || d.ActiveRangesTotal != active || d.Truncated {
		t.Fatalf("describe: %d ranges (total %d, active %d), truncated %v", len(d.Ranges), d.RangesTotal, d.ActiveRangesTotal, d.Truncated)
	}
	for i := 1; i < len(d.Ranges); i++ {
		if d.Ranges[i].ID <= d.Ranges[i-1].ID {
			t.Fatalf("range %d listed after %d", d.Ranges[i].ID, d.Ranges[i-1].ID)
		}
	}

	var few topicJSON
	if err := json.Unmarshal([]byte(c.ok("topic", "describe", "big", "--active", "--limit", "10", "-o", "json")), &few); err != nil {
		t.Fatal(err)
	}
	if len(few.Ranges) != 10 || !few.Truncated || few.RangesTotal != total {
		t.Fatalf("--active --limit 10: %d ranges, truncated %v, total %d", len(few.Ranges), few.Truncated, few.RangesTotal)
	}
	for _, r := range few.Ranges {
		if !r.Active {
			t.Fatalf("--active listed sealed range %d", r.ID)
		}
	}

	text := c.ok("topic", "describe", "big", "--limit", "5")
	if !strings.HasPrefix(text, "Topic ") || !strings.Contains(text, "1624 (+600 sealed)") ||
		!strings.Contains(text, "Listed 5 ranges of 2224") {
		t.Fatalf("describe --limit 5 text:\n%s", text)
	}
	if rows := strings.Count(text[strings.Index(text, "\nRanges"):], "\n"); rows > 20 {
		t.Fatalf("describe --limit 5 printed %d lines of ranges and segments", rows)
	}
	c.fails(2, "topic", "describe", "big", "--limit", "-1")
}
