package server

import (
	"errors"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Bounds of one page of describe_topic (version 3). A page holds at most
// maxPageRanges ranges (a larger request is clamped) and about
// describePageBytes of ranges and segments, less when the frame limit is
// smaller; a range too large for a page on its own lists its newest
// segments and counts the others. With active ranges only, a page looks
// at no more than pageScanFactor times its size of ranges, so one among
// many sealed ranges may come back short, or empty, with a next token.
// Passing over a sealed range is a map lookup; at 8 times the size an
// empty page costs about half what a page of listed ranges does
// (docs/perf.md).
const (
	maxPageRanges     = 10_000
	describePageBytes = 1 << 20
	pageScanFactor    = 8
)

// wholeRangeMin is the least a range takes in a whole description
// (versions 1 and 2): a range in a page takes 4 bytes more.
var wholeRangeMin = wire.RangeInfoSize(&wire.RangeInfo{}) - 4

var (
	errDescribeTooLarge = errors.New(wire.ReasonDescribeTooLarge)
	errPageToken        = errors.New(wire.ReasonInvalidPageToken)
)

// pageTokenPrefix marks the tokens this node mints; the version in it
// lets a later layout be told apart.
const pageTokenPrefix = "d1."

// pageToken is the token of the page after range after of topic: the
// topic's id binds it to the topic as it was when paging began.
func pageToken(topic, after uint64) string {
	return pageTokenPrefix + strconv.FormatUint(topic, 36) + "." + strconv.FormatUint(after, 36)
}

// parsePageToken reads a token pageToken made; nil is the first page.
// Any other token (altered, truncated, not canonical) is refused.
func parsePageToken(tok *string) (topic, after uint64, err error) {
	if tok == nil {
		return 0, 0, nil
	}
	rest, ok := strings.CutPrefix(*tok, pageTokenPrefix)
	t, a, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return 0, 0, errPageToken
	}
	topic, err1 := strconv.ParseUint(t, 36, 64)
	after, err2 := strconv.ParseUint(a, 36, 64)
	if err1 != nil || err2 != nil || topic == 0 || after == 0 || pageToken(topic, after) != *tok {
		return 0, 0, errPageToken
	}
	return topic, after, nil
}

// describeTopicPage answers one page of describe_topic.
func (c *conn) describeTopicPage(r *wire.DescribeTopicRequest) (wire.Response, error) {
	topicID, after, err := parsePageToken(r.PageToken)
	if err != nil {
		return nil, err
	}
	n := min(int(r.MaxRanges), maxPageRanges)
	budget := min(describePageBytes, int(c.s.cfg.MaxFrame)-frameSlack)
	p, err := c.s.b.DescribeTopicPage(deref(r.Topic), broker.PageQuery{
		TopicID: topicID, After: after, Max: n, Scan: n * pageScanFactor, ActiveOnly: r.ActiveOnly(),
		MaxSegments: budget / wire.SegmentInfoSize(&wire.SegmentInfo{}),
		Segments:    budget / wire.SegmentInfoSize(&wire.SegmentInfo{}),
		Groups:      r.PageToken == nil, Copies: r.WantsCopies(),
	})
	if errors.Is(err, broker.ErrTopicRecreated) {
		return nil, errPageToken
	}
	if err != nil {
		return nil, err
	}
	// Groups take at most half the page, so that the first page fits
	// whatever the topic's groups and still lists ranges.
	groups, omitted := fitGroups(p.Groups, budget/2)
	resp := &wire.DescribeTopicPageResponse{
		ID: p.ID, Name: p.Name, Bits: p.Bits, CreatedAt: ms(p.CreatedAt), Groups: groups, GroupsOmitted: uint32(omitted),
		RangesTotal: uint32(p.RangesTotal), ActiveRanges: uint32(p.ActiveRanges), Copies: r.WantsCopies(),
	}
	room := budget - wire.PageHeaderSize(p.Name) - wire.StringsSize(groups)
	last, more := p.Last, p.More
	resp.Ranges = make([]wire.RangeInfo, 0, len(p.Ranges))
	for i := range p.Ranges {
		ri := rangeInfo(&p.Ranges[i])
		size := pageRangeSize(&ri)
		if size > room && len(resp.Ranges) > 0 {
			// The rest waits for the next page.
			last, more = resp.Ranges[len(resp.Ranges)-1].ID, true
			break
		}
		if size > room {
			size = trimOldest(&ri, room)
		}
		resp.Ranges = append(resp.Ranges, ri)
		room -= size
	}
	if more {
		resp.Next = new(pageToken(p.ID, last))
	}
	if resp.Copies {
		resp.CopiesOmitted = capCopiesOf(resp.Ranges, pageBaseSize(resp), c.s.cfg.MaxFrame)
	}
	return resp, nil
}

// wholeFits refuses, before anything is built, a whole description of
// topic (versions 1 and 2) that would not fit room bytes: it counts the
// answer's size range by range with segments and groups, and stops as
// soon as the count passes room, so a refusal costs about a frame's
// worth of counting and no copy of the topic. The built answer is
// checked again, as the topic may grow meanwhile.
func (c *conn) wholeFits(topic string, room int) error {
	head, err := c.s.b.DescribeTopicPage(topic, broker.PageQuery{Groups: true})
	if err != nil {
		return err
	}
	base := wire.DescribeTopicSize(&wire.DescribeTopicResponse{Name: head.Name, Groups: head.Groups})
	if base > room {
		return errDescribeTooLarge
	}
	size, err := c.s.b.DescribeTopicSize(topic, room-base, wholeRangeSize, wholeSegmentSize)
	if err != nil {
		return err
	}
	if size > room-base {
		return errDescribeTooLarge
	}
	return nil
}

// wholeRangeSize and wholeSegmentSize are the encoded sizes of a range
// and a segment in a whole description.
func wholeRangeSize(parents int) int { return wholeRangeMin + 8*parents }

func wholeSegmentSize(replicas []string) int {
	return wire.SegmentInfoSize(&wire.SegmentInfo{Replicas: replicas})
}

// fitGroups keeps the first of groups (sorted by name) whose list takes
// at most room bytes, and answers how many it left out.
func fitGroups(groups []string, room int) ([]string, int) {
	size := wire.StringsSize(nil)
	for i, g := range groups {
		if size += wire.StringsSize([]string{g}) - wire.StringsSize(nil); size > room {
			return groups[:i], len(groups) - i
		}
	}
	return groups, 0
}

// pageRangeSize is ri's encoded size in a page, segments included.
func pageRangeSize(ri *wire.RangeInfo) int {
	n := wire.RangeInfoSize(ri)
	for j := range ri.Segments {
		n += wire.SegmentInfoSize(&ri.Segments[j])
	}
	return n
}

// trimOldest leaves out ri's oldest segments until it takes at most room
// bytes (its newest segment stays, whatever its size) and answers its
// size.
func trimOldest(ri *wire.RangeInfo, room int) int {
	size := pageRangeSize(ri)
	for len(ri.Segments) > 1 && size > room {
		size -= wire.SegmentInfoSize(&ri.Segments[0])
		ri.Segments = ri.Segments[1:]
		ri.SegmentsOmitted++
	}
	return size
}

// pageBaseSize is the size of resp without its copies section.
func pageBaseSize(resp *wire.DescribeTopicPageResponse) int {
	base := *resp
	base.Copies = false
	return len(base.AppendPayload(nil))
}

// rangeInfo encodes a range of the broker's description.
func rangeInfo(rg *broker.RangeDescription) wire.RangeInfo {
	ri := wire.RangeInfo{
		ID: rg.ID, Start: rg.Start, End: rg.End, Active: rg.Active, Parents: rg.Parents,
		CreatedAt: ms(rg.CreatedAt), SealedAt: ms(rg.SealedAt), SegmentsOmitted: uint32(rg.SegmentsOmitted),
	}
	if len(rg.Segments) > 0 {
		ri.Segments = make([]wire.SegmentInfo, 0, len(rg.Segments))
	}
	for _, s := range rg.Segments {
		ri.Segments = append(ri.Segments, wire.SegmentInfo{
			ID: s.ID, Active: s.Active, Base: s.Base, End: s.End, Records: s.Records, Bytes: s.Bytes,
			Replicas: s.Replicas, OpenedAt: ms(s.OpenedAt), SealedAt: ms(s.SealedAt), MaxExpiry: ms(s.MaxExpiry),
			Copies: segmentCopies(s.Copies),
		})
	}
	return ri
}
