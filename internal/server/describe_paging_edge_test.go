package server

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// The first page of describe_topic lists the topic's groups whole, outside
// the page's byte budget (describeTopicPage subtracts them from room and
// goes on): a topic whose consumers committed under enough long group
// names gets a first page past the frame limit, so no page of it can be
// read, and the unpaged answer is refused as too large as well. Breaks
// "a topic of any size is described within the frame".
func TestDescribeFirstPageWithManyGroupsFitsTheFrame(t *testing.T) {
	const frame = 16 << 10
	s := startServer(t, Config{MaxFrame: frame})
	wideTopic(t, s.b, "busy", 4, 8)
	p, err := s.b.Fetch(t.Context(), broker.FetchRequest{Topic: "busy", Max: 1})
	if err != nil || p.Cursor == nil {
		t.Fatalf("fetch: %v", err)
	}
	const groups = 100 // within the default 1,000 groups per topic
	for i := range groups {
		g := fmt.Sprintf("%03d-%s", i, strings.Repeat("g", 240))
		if err := s.b.Commit(t.Context(), "busy", g, *p.Cursor); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	c := dialClient(t, s)
	c.auth()
	busy := "busy"
	c.request(1, &wire.DescribeTopicRequest{Topic: &busy, Flags: wire.FlagPaged, MaxRanges: 100})
	payload := c.answer(1)
	if n := len(payload) + frameSlack; n > frame {
		t.Fatalf("first page of %d bytes in a %d-byte frame (%d groups of 244 bytes listed whole)", n, frame, groups)
	}
}

// An unpaged describe_topic (versions 1 and 2) is refused before anything
// is built only when the topic has more ranges than the frame holds at 49
// bytes each (handlers.go, head.RangesTotal > room/wholeRangeMin): a topic
// below that count whose ranges have segments is built whole (metadata
// copies, broker description, wire ranges) and only then refused. At the
// default 16 MiB frame the count is 342,000, above the node's 100,000
// ranges, so every large topic is built whole on every such request.
// Breaks docs/wire.md "an unpaged request costs at most about a frame".
func TestDescribeUnpagedRefusalCostsAboutAFrame(t *testing.T) {
	const frame = 64 << 10
	s := startServer(t, Config{MaxFrame: frame})
	wideTopic(t, s.b, "wide", 1024, 6000)
	c := dialClient(t, s)
	c.auth()
	wide := "wide"
	least := uint64(1 << 62)
	for i := range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		corr := uint32(10 + i)
		c.request(corr, &wire.DescribeTopicRequest{Topic: &wide})
		reason := c.refused(corr)
		runtime.ReadMemStats(&after)
		if reason != wire.ReasonDescribeTooLarge {
			t.Fatalf("whole description of 1,024 ranges with segments in a 64 KiB frame: %q", reason)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > 4*frame {
		t.Fatalf("a refused unpaged describe allocated %d bytes (%.1f frames of %d) before refusing", least, float64(least)/frame, frame)
	}
}
