package client

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// describeNode is a fake node holding a topic of n ranges (ids 1..n, odd
// ones active). It answers describe_topic by pages when asked, else
// whole, and records each request.
type describeNode struct {
	n  int
	mu sync.Mutex
	// reqs are the describe_topic requests received.
	reqs []wire.DescribeTopicRequest
}

func (d *describeNode) rangeInfo(id int) wire.RangeInfo {
	return wire.RangeInfo{ID: uint64(id), Start: uint64(id), End: uint64(id + 1), Active: id%2 == 1}
}

func (d *describeNode) handle(fc *fakeConn, corr uint32, req wire.Request) {
	r, ok := req.(*wire.DescribeTopicRequest)
	if !ok {
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
		return
	}
	d.mu.Lock()
	d.reqs = append(d.reqs, *r)
	d.mu.Unlock()
	if !r.Paged() {
		resp := wire.DescribeTopicResponse{ID: 1, Name: "t", Bits: 20, Groups: []string{"g"}, Copies: r.WantsCopies()}
		for id := 1; id <= d.n; id++ {
			resp.Ranges = append(resp.Ranges, d.rangeInfo(id))
		}
		fc.ok(corr, resp)
		return
	}
	after := 0
	if r.PageToken != nil {
		var err error
		if after, err = strconv.Atoi(*r.PageToken); err != nil {
			fc.refuse(corr, wire.ReasonInvalidPageToken)
			return
		}
	}
	resp := wire.DescribeTopicPageResponse{ID: 1, Name: "t", Bits: 20, RangesTotal: uint32(d.n), ActiveRanges: uint32((d.n + 1) / 2), Copies: r.WantsCopies()}
	if r.PageToken == nil {
		resp.Groups = []string{"g"}
	}
	id := after + 1
	for ; id <= d.n && len(resp.Ranges) < int(r.MaxRanges); id++ {
		if ri := d.rangeInfo(id); ri.Active || !r.ActiveOnly() {
			resp.Ranges = append(resp.Ranges, ri)
		}
	}
	if id <= d.n {
		resp.Next = new(strconv.Itoa(id - 1))
	}
	fc.ok(corr, resp)
}

// DescribeTopic pages through a node that serves version 3, and asks an
// older node for the whole topic; both give the same description.
func TestDescribeTopicPagesOnlyNodesThatPage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   uint16
		pages int
	}{
		{"version 2 node", 2, 1},
		{"version 3 node", 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &describeNode{n: 450}
			c := dialFake(t, startFakeWith(t, fakeOptions{versions: versionsUpTo(tc.max)}, node.handle))
			d, err := c.DescribeTopic(t.Context(), "t", DescribePageSize(100))
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Ranges) != 450 || d.RangesTotal != 450 || d.ActiveRangesTotal != 225 || len(d.Groups) != 1 || d.Truncated {
				t.Fatalf("%d ranges (total %d, active %d), groups %v, truncated %v", len(d.Ranges), d.RangesTotal, d.ActiveRangesTotal, d.Groups, d.Truncated)
			}
			for i, r := range d.Ranges {
				if r.ID != uint64(i+1) {
					t.Fatalf("range %d has id %d", i, r.ID)
				}
			}
			active, err := c.DescribeTopic(t.Context(), "t", DescribeActiveOnly(), DescribeLimit(30))
			if err != nil || len(active.Ranges) != 30 || !active.Truncated || active.Ranges[29].ID != 59 {
				t.Fatalf("active, at most 30: %d ranges, truncated %v, %v", len(active.Ranges), active.Truncated, err)
			}
			node.mu.Lock()
			defer node.mu.Unlock()
			paged := 0
			for _, r := range node.reqs {
				if r.Paged() {
					paged++
				}
			}
			if tc.max < 3 && paged != 0 {
				t.Fatalf("%d paged requests sent to a node that does not page", paged)
			}
			if tc.max >= 3 && paged != len(node.reqs) {
				t.Fatalf("%d of %d requests paged", paged, len(node.reqs))
			}
			if len(node.reqs) < tc.pages {
				t.Fatalf("%d requests, want at least %d", len(node.reqs), tc.pages)
			}
		})
	}
}

// A node that sends a new token with every empty page moves nowhere the
// client can see; the bound on pages (from the ranges the topic has)
// stops the paging before the node gives up.
func TestDescribeTopicBoundsPagesOfANodeThatOnlyChangesTokens(t *testing.T) {
	var (
		mu sync.Mutex
		n  int
	)
	c := dialFake(t, startFakeWith(t, fakeOptions{versions: versionsUpTo(3)}, func(fc *fakeConn, corr uint32, req wire.Request) {
		if _, ok := req.(*wire.DescribeTopicRequest); !ok {
			fc.ok(corr, wire.StatusResponse{NodeID: "n"})
			return
		}
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k > 1000 {
			fc.refuse(corr, wire.ReasonInvalidPageToken)
			return
		}
		fc.ok(corr, wire.DescribeTopicPageResponse{ID: 1, Name: "t", Bits: 20, RangesTotal: 3, ActiveRanges: 1,
			Next: new("p" + strconv.Itoa(k))})
	}))
	_, err := c.DescribeTopic(t.Context(), "t", DescribeActiveOnly())
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(err, ErrProtocol) || n > 3+3/2+pageSlack+1 {
		t.Fatalf("%d pages, then %v; want a protocol error within %d pages", n, err, 3+3/2+pageSlack+1)
	}
}
