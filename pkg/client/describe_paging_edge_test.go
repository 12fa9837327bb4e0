package client

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// stuckNode answers every describe_topic page without progress, as a
// faulty or hostile node might: with stall, no ranges and the very token
// it was sent; otherwise range 1 again on every page, with a token. It
// gives up (invalid_page_token) after giveUp requests, so a client that
// does not notice ends anyway, and counts the requests.
type stuckNode struct {
	stall bool
	mu    sync.Mutex
	n     int
}

const giveUp = 200

func (s *stuckNode) handle(fc *fakeConn, corr uint32, req wire.Request) {
	r, ok := req.(*wire.DescribeTopicRequest)
	if !ok {
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
		return
	}
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if n > giveUp {
		fc.refuse(corr, wire.ReasonInvalidPageToken)
		return
	}
	resp := wire.DescribeTopicPageResponse{ID: 1, Name: "t", Bits: 20, RangesTotal: 1, ActiveRanges: 1, Next: new("d1.1.1")}
	switch {
	case s.stall && r.PageToken != nil:
		resp.Next = r.PageToken
	case !s.stall:
		resp.Ranges = []wire.RangeInfo{{ID: 1, Start: 0, End: 1 << 20, Active: true}}
	}
	fc.ok(corr, resp)
}

// DescribeTopic pages until a page comes without a next token, trusting
// the node to make progress (describe.go, the loop in DescribeTopic): a
// node that sends back the token it was given, or the same ranges on
// every page, keeps it asking forever (bounded only by the context, which
// the CLI and most callers leave without a deadline), and in the second
// case collects the same range again and again. Range ids come ascending
// and a page's token is after its ranges (docs/wire.md), so both are
// detectable after one page.
func TestDescribeTopicStopsOnANodeThatMakesNoProgress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall bool
	}{
		{"same token back, no ranges", true},
		{"same range on every page", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &stuckNode{stall: tc.stall}
			c := dialFake(t, startFakeWith(t, fakeOptions{versions: versionsUpTo(3)}, node.handle))
			d, err := c.DescribeTopic(t.Context(), "t")
			node.mu.Lock()
			n := node.n
			node.mu.Unlock()
			if n > giveUp {
				t.Fatalf("%d requests to a node making no progress (ended only by the node: %v); %d ranges collected",
					n, err, len(d.Ranges))
			}
			if err == nil {
				t.Fatalf("no error from a node making no progress: %d ranges", len(d.Ranges))
			}
			if errors.Is(err, ErrInvalidPageToken) {
				t.Fatalf("ended by the node's refusal, not by the client: %v", err)
			}
		})
	}
}

// scanNode is a fake node holding a topic of n ranges (ids 1..n) whose
// last active ones are active, the rest sealed, paging as a real node
// does: a page with active ranges only looks at no more than 16 times
// its max_ranges ranges (docs/wire.md, "Bounds"), and may come back
// empty with a next token.
type scanNode struct {
	n, active int
	mu        sync.Mutex
	reqs      int
}

func (s *scanNode) handle(fc *fakeConn, corr uint32, req wire.Request) {
	r, ok := req.(*wire.DescribeTopicRequest)
	if !ok || !r.Paged() {
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
		return
	}
	s.mu.Lock()
	s.reqs++
	s.mu.Unlock()
	after := 0
	if r.PageToken != nil {
		after, _ = strconv.Atoi(strings.TrimPrefix(*r.PageToken, "p"))
	}
	resp := wire.DescribeTopicPageResponse{ID: 1, Name: "t", Bits: 20, RangesTotal: uint32(s.n), ActiveRanges: uint32(s.active)}
	id, scan := after+1, 16*int(r.MaxRanges)
	for ; id <= s.n && len(resp.Ranges) < int(r.MaxRanges) && scan > 0; id, scan = id+1, scan-1 {
		if active := id > s.n-s.active; active || !r.ActiveOnly() {
			resp.Ranges = append(resp.Ranges, wire.RangeInfo{ID: uint64(id), Start: uint64(id), End: uint64(id + 1), Active: active})
		}
	}
	if id <= s.n {
		resp.Next = new("p" + strconv.Itoa(id-1))
	}
	fc.ok(corr, resp)
}

// DescribeTopic asks each page for no more ranges than DescribeLimit has
// left (describe.go: size = min(size, limit-len(d.Ranges))), and a node
// scans 16 times the asked size with active ranges only: so a small limit
// shrinks the scan with it, and the active ranges behind many sealed ones
// (the usual shape: splits seal the oldest ids) take hundreds of round
// trips where no limit takes two. --active --limit 1 on a topic of
// 100,000 ranges is about 6,000 requests. A limit should cut the listing,
// not the pages asked.
func TestDescribeActiveWithALimitAsksNoMorePagesThanWithout(t *testing.T) {
	node := &scanNode{n: 20_000, active: 10}
	c := dialFake(t, startFakeWith(t, fakeOptions{versions: versionsUpTo(3)}, node.handle))
	count := func(opts ...DescribeOption) int {
		t.Helper()
		node.mu.Lock()
		node.reqs = 0
		node.mu.Unlock()
		d, err := c.DescribeTopic(t.Context(), "t", append(opts, DescribeActiveOnly())...)
		if err != nil || len(d.Ranges) == 0 || !d.Ranges[0].Active {
			t.Fatalf("describe: %d ranges, %v", len(d.Ranges), err)
		}
		node.mu.Lock()
		defer node.mu.Unlock()
		return node.reqs
	}
	whole := count()
	if limited := count(DescribeLimit(1)); limited > whole {
		t.Fatalf("active ranges, at most 1: %d requests; all active ranges: %d", limited, whole)
	}
}
