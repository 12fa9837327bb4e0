package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
	mclient "github.com/malachi-log/malachi/pkg/client"
)

// wideTopic creates topic with n ranges: up to 1,024 initial ones (the
// most a topic starts with), then splits of the first active ones. It
// writes one keyed record to about keys of them, so that those have
// segments.
func wideTopic(t *testing.T, b *broker.Broker, topic string, n, keys int) {
	t.Helper()
	ctx := t.Context()
	initial := min(n, 1024)
	if err := b.CreateTopic(ctx, topic, 20, initial); err != nil {
		t.Fatal(err)
	}
	for next := uint64(0); initial < n; initial += 2 {
		d, err := b.DescribeTopicPage(topic, broker.PageQuery{After: next, Max: 1, Scan: n, ActiveOnly: true})
		if err != nil || len(d.Ranges) == 0 {
			t.Fatalf("an active range after %d: %v", next, err)
		}
		next = d.Ranges[0].ID
		if _, err := b.SplitRange(ctx, topic, next); err != nil {
			t.Fatal(err)
		}
	}
	if keys == 0 {
		return
	}
	recs := make([]broker.Record, keys)
	for i := range recs {
		recs[i] = broker.Record{Key: []byte("key-" + strconv.Itoa(i)), Value: []byte("v")}
	}
	if _, err := b.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
}

func dialAdmin(t *testing.T, s *Server) *mclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := mclient.Dial(ctx, s.Addr().String(), mclient.WithCredentials("admin", "admin123"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refused reads the next answer and returns its error reason; an ok
// answer fails the test.
func (c *client) refused(corr uint32) string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		c.t.Fatalf("waiting for the answer to %d: %v", corr, err)
	}
	got, code, payload, err := wire.ParseResponse(body)
	if err != nil || got != corr || code != wire.CodeError {
		c.t.Fatalf("answer to %d (want %d): code %d, %v", got, corr, code, err)
	}
	reason, _ := wire.DecodeError(payload)
	return reason
}

// A topic of thousands of ranges, described through a real server by the
// client, page by page (pages ended by their size and by the frame),
// equals the broker's own view.
func TestDescribeTopicByPagesEqualsTheBroker(t *testing.T) {
	s := startServer(t, Config{MaxFrame: 16 << 10})
	wideTopic(t, s.b, "wide", 3000, 300)
	for range 3 {
		if _, err := s.b.SplitRange(t.Context(), "wide", 0); err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.b.DescribeTopic("wide")
	if err != nil {
		t.Fatal(err)
	}
	c := dialAdmin(t, s)
	got, err := c.DescribeTopic(t.Context(), "wide", mclient.DescribePageSize(700))
	if err != nil {
		t.Fatal(err)
	}
	if got.RangesTotal != len(want.Ranges) || len(got.Ranges) != len(want.Ranges) || got.ID != want.ID {
		t.Fatalf("described %d ranges (total %d) of topic %d, the broker has %d of %d",
			len(got.Ranges), got.RangesTotal, got.ID, len(want.Ranges), want.ID)
	}
	segments := 0
	for i, w := range want.Ranges {
		g := got.Ranges[i]
		if g.ID != w.ID || g.Start != w.Start || g.End != w.End || g.Active != w.Active ||
			!slices.Equal(g.Parents, w.Parents) || len(g.Segments) != len(w.Segments) || g.SegmentsOmitted != 0 {
			t.Fatalf("range %d: described %+v, the broker has %+v", i, g, w)
		}
		for j, ws := range w.Segments {
			if gs := g.Segments[j]; gs.ID != ws.ID || gs.Records != ws.Records || gs.Active != ws.Active {
				t.Fatalf("range %d segment %d: described %+v, the broker has %+v", w.ID, j, gs, ws)
			}
			segments++
		}
	}
	if segments == 0 {
		t.Fatal("no range has a segment; the test proves little")
	}
	active, err := c.DescribeTopic(t.Context(), "wide", mclient.DescribeActiveOnly(), mclient.DescribeLimit(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(active.Ranges) != 100 || !active.Truncated || active.ActiveRangesTotal != activeOf(want) {
		t.Fatalf("active, at most 100: %d ranges, truncated %v, %d active", len(active.Ranges), active.Truncated, active.ActiveRangesTotal)
	}
	for _, r := range active.Ranges {
		if !r.Active {
			t.Fatalf("range %d is sealed in an active-only description", r.ID)
		}
	}
}

// While ranges split between pages, a range present for the whole paging
// is listed exactly once, and ids only increase.
func TestDescribePagingWhileSplitting(t *testing.T) {
	s := startServer(t, Config{})
	wideTopic(t, s.b, "moving", 1024, 0)
	before, err := s.b.DescribeTopic("moving")
	if err != nil {
		t.Fatal(err)
	}
	c := dialAdmin(t, s)
	seen := map[uint64]int{}
	var last uint64
	token := ""
	for pages := 0; ; pages++ {
		p, err := c.DescribeTopicPage(t.Context(), "moving", token, mclient.DescribePageSize(50))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Ranges {
			if r.ID <= last {
				t.Fatalf("page %d lists range %d after %d", pages, r.ID, last)
			}
			last = r.ID
			seen[r.ID]++
		}
		if p.Next == "" {
			break
		}
		token = p.Next
		// Split a range already listed and one not listed yet.
		for _, id := range []uint64{before.Ranges[pages%len(before.Ranges)].ID, before.Ranges[len(before.Ranges)-1-pages].ID} {
			if _, err := s.b.SplitRange(t.Context(), "moving", id); err != nil {
				t.Fatalf("split %d: %v", id, err)
			}
		}
	}
	for _, r := range before.Ranges {
		if seen[r.ID] != 1 {
			t.Fatalf("range %d, present throughout, listed %d times", r.ID, seen[r.ID])
		}
	}
	after, _ := s.b.DescribeTopic("moving")
	if len(seen) != len(after.Ranges) {
		t.Fatalf("listed %d ranges; the topic has %d (all created before the last page)", len(seen), len(after.Ranges))
	}
}

// Version 1 and 2 on a topic too large for a frame answer
// describe_too_large, not a frame past the limit; bad page requests are
// refused clearly, and the connection keeps serving.
func TestDescribeBadInputAndTooLarge(t *testing.T) {
	s := startServer(t, Config{MaxFrame: 8 << 10})
	wideTopic(t, s.b, "wide", 1024, 0)
	wideTopic(t, s.b, "small", 4, 0)
	c := dialClient(t, s)
	c.auth()
	wide := "wide"
	for i, req := range []*wire.DescribeTopicRequest{{Topic: &wide}, {Topic: &wide, Flags: wire.FlagCopies}} {
		corr := uint32(10 + i)
		c.request(corr, req)
		if r := c.refused(corr); r != wire.ReasonDescribeTooLarge {
			t.Fatalf("whole description of 1,024 ranges in an 8 KiB frame: %q", r)
		}
	}
	for i, tok := range []string{"d1.zz", "x", "d1.1.0", "d1.01.1", pageToken(999, 1)} {
		corr := uint32(20 + i)
		c.request(corr, &wire.DescribeTopicRequest{Topic: &wide, Flags: wire.FlagPaged, PageToken: &tok, MaxRanges: 10})
		if r := c.refused(corr); r != wire.ReasonInvalidPageToken {
			t.Fatalf("token %q: %q", tok, r)
		}
	}
	// A zero page size is malformed, on the request's own id.
	zero := wire.DescribeTopicRequest{Topic: &wide, Flags: wire.FlagPaged, MaxRanges: 1}.AppendPayload(nil)
	zero[len(zero)-1] = 0
	frame := wire.AppendRequestFrame(nil, 30, rawRequest{key: wire.KeyDescribeTopic, payload: zero})
	if _, err := c.nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	if r := c.refused(30); r != wire.ReasonMalformedRequest {
		t.Fatalf("page of 0 ranges: %q", r)
	}
	// A huge page size is capped by the node.
	c.request(31, &wire.DescribeTopicRequest{Topic: &wide, Flags: wire.FlagPaged, MaxRanges: 1 << 31})
	var page wire.DescribeTopicPageResponse
	if err := page.Decode(c.answer(31)); err != nil {
		t.Fatal(err)
	}
	if len(page.Ranges) == 0 || len(page.Ranges) > maxPageRanges || page.Next == nil || page.RangesTotal != 1024 {
		t.Fatalf("page of at most 2^31 ranges: %d ranges, next %v, total %d", len(page.Ranges), page.Next, page.RangesTotal)
	}
	if n := len(page.AppendPayload(nil)); n+frameSlack > 8<<10 {
		t.Fatalf("page of %d bytes in an 8 KiB frame", n)
	}
	// Fewer ranges than the frame holds bare, but too large with their
	// segments: refused once built; by pages, all of it.
	wideTopic(t, s.b, "mid", 128, 2000)
	mid := "mid"
	c.request(34, &wire.DescribeTopicRequest{Topic: &mid})
	if r := c.refused(34); r != wire.ReasonDescribeTooLarge {
		t.Fatalf("whole description of 128 ranges with segments in an 8 KiB frame: %q", r)
	}
	var tok *string
	listed, pages := 0, 0
	for ; ; pages++ {
		c.request(35, &wire.DescribeTopicRequest{Topic: &mid, Flags: wire.FlagPaged, PageToken: tok, MaxRanges: 1000})
		var p wire.DescribeTopicPageResponse
		if err := p.Decode(c.answer(35)); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Ranges {
			if len(r.Segments) == 0 || r.SegmentsOmitted != 0 {
				t.Fatalf("range %d: %d segments, %d omitted", r.ID, len(r.Segments), r.SegmentsOmitted)
			}
		}
		listed += len(p.Ranges)
		if tok = p.Next; tok == nil {
			break
		}
	}
	if listed != 128 || pages < 2 {
		t.Fatalf("listed %d ranges in %d pages", listed, pages+1)
	}
	// A small topic still answers the whole description.
	small := "small"
	c.request(32, &wire.DescribeTopicRequest{Topic: &small})
	var whole wire.DescribeTopicResponse
	if err := whole.Decode(c.answer(32)); err != nil || len(whole.Ranges) != 4 {
		t.Fatalf("small topic: %d ranges, %v", len(whole.Ranges), err)
	}
	// A token of a topic deleted and created again is refused.
	if err := s.b.DeleteTopic(t.Context(), "wide"); err != nil {
		t.Fatal(err)
	}
	wideTopic(t, s.b, "wide", 4, 0)
	c.request(33, &wire.DescribeTopicRequest{Topic: &wide, Flags: wire.FlagPaged, PageToken: page.Next, MaxRanges: 10})
	if r := c.refused(33); r != wire.ReasonInvalidPageToken {
		t.Fatalf("token of the deleted topic: %q", r)
	}
}

// A range whose segments alone pass a page lists its newest segments and
// counts the others.
func TestDescribePageCapsALongRange(t *testing.T) {
	resp := &wire.RangeInfo{ID: 1}
	for i := range 1000 {
		resp.Segments = append(resp.Segments, wire.SegmentInfo{ID: uint64(i + 1), Replicas: []string{"node-1"}})
	}
	size := trimOldest(resp, 10_000)
	if size > 10_000 || pageRangeSize(resp) != size || resp.Segments[len(resp.Segments)-1].ID != 1000 ||
		int(resp.SegmentsOmitted)+len(resp.Segments) != 1000 || resp.SegmentsOmitted == 0 {
		t.Fatalf("trimmed to %d bytes: %d segments kept, %d omitted", size, len(resp.Segments), resp.SegmentsOmitted)
	}
}

func activeOf(d broker.TopicDescription) int {
	n := 0
	for _, r := range d.Ranges {
		if r.Active {
			n++
		}
	}
	return n
}

// A topic with more groups than half a page holds lists the first by name
// and counts the others, and the client sees both.
func TestDescribeListsTheFirstGroupsAndCountsTheRest(t *testing.T) {
	s := startServer(t, Config{MaxFrame: 16 << 10})
	wideTopic(t, s.b, "busy", 4, 8)
	p, err := s.b.Fetch(t.Context(), broker.FetchRequest{Topic: "busy", Max: 1})
	if err != nil || p.Cursor == nil {
		t.Fatalf("fetch: %v", err)
	}
	var names []string
	for i := range 100 {
		g := fmt.Sprintf("%03d-%s", 99-i, strings.Repeat("g", 240))
		if err := s.b.Commit(t.Context(), "busy", g, *p.Cursor); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		names = append(names, g)
	}
	slices.Sort(names)
	d, err := dialAdmin(t, s).DescribeTopic(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Groups) == 0 || d.GroupsOmitted == 0 || len(d.Groups)+d.GroupsOmitted != len(names) ||
		!slices.Equal(d.Groups, names[:len(d.Groups)]) || len(d.Ranges) != 4 {
		t.Fatalf("%d groups listed, %d omitted, %d ranges; want the first of %d by name and all 4 ranges",
			len(d.Groups), d.GroupsOmitted, len(d.Ranges), len(names))
	}
}

// The size counted before an unpaged description is built is the size of
// the description built, so a topic that fits is answered as before and
// one that does not is refused without being built.
func TestDescribeWholeSizeIsCountedExactly(t *testing.T) {
	s := startServer(t, Config{})
	wideTopic(t, s.b, "wide", 256, 2000)
	d, err := s.b.DescribeTopic("wide")
	if err != nil {
		t.Fatal(err)
	}
	resp := &wire.DescribeTopicResponse{Name: d.Name, Groups: d.Groups}
	for i := range d.Ranges {
		resp.Ranges = append(resp.Ranges, rangeInfo(&d.Ranges[i]))
	}
	want := wire.DescribeTopicSize(resp)
	base := wire.DescribeTopicSize(&wire.DescribeTopicResponse{Name: d.Name, Groups: d.Groups})
	got, err := s.b.DescribeTopicSize("wide", want, wholeRangeSize, wholeSegmentSize)
	if err != nil || base+got != want {
		t.Fatalf("counted %d+%d bytes (%v), built %d", base, got, err, want)
	}
	if got, _ := s.b.DescribeTopicSize("wide", 1000, wholeRangeSize, wholeSegmentSize); got <= 1000 || got > 2000 {
		t.Fatalf("counting up to 1,000 bytes stopped at %d", got)
	}
}
