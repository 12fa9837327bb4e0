package client

import (
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// skipsNode is a fake v2 node that reports skips when asked, and records
// the flags each fetch_batches and describe_group carried.
type skipsNode struct {
	mu         sync.Mutex
	fetchFlags []uint8
	groupFlags []uint8
}

func (n *skipsNode) handle(fc *fakeConn, corr uint32, req wire.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := "c"
	switch r := req.(type) {
	case *wire.FetchBatchesRequest:
		n.fetchFlags = append(n.fetchFlags, r.Flags)
		fc.ok(corr, wire.FetchBatchesResponse{NextCursor: &cur, Skips: wire.Skips{Asked: r.WantsSkips(), Count: 7, Bound: true}})
	case *wire.DescribeGroupRequest:
		n.groupFlags = append(n.groupFlags, r.Flags)
		fc.ok(corr, wire.DescribeGroupResponse{Group: "g", Cursor: &cur, Skips: wire.Skips{Asked: r.WantsSkips(), Count: 3}})
	case *wire.TopicRoutesRequest:
		fc.ok(corr, &fakeRoutes)
	default:
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
	}
}

// versionsUpTo lists every key, none past version max.
func versionsUpTo(max uint16) *wire.APIVersionsResponse {
	keys := wire.Versions()
	for i := range keys {
		keys[i].Max = min(keys[i].Max, max)
	}
	return &wire.APIVersionsResponse{Keys: keys, MaxFrame: 1 << 20, MaxBatchBytes: 1 << 20, MaxBatchRecords: 1000}
}

// The client asks for skips only of a node that serves version 2 of the
// keys that carry them, and hands the counts over.
func TestSkipsAskedOnlyOfNodesThatReportThem(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   uint16
		flags uint8
		count uint64
	}{
		{"version 1 node", 1, 0, 0},
		{"version 2 node", 2, wire.FlagSkips, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &skipsNode{}
			c := dialFake(t, startFakeWith(t, fakeOptions{versions: versionsUpTo(tc.max)}, node.handle))
			page, err := c.FetchBatches(t.Context(), "t", FetchOptions{})
			if err != nil || page.Skipped != tc.count || page.SkippedBound != (tc.count > 0) {
				t.Fatalf("fetch: skipped %d bound %v, %v", page.Skipped, page.SkippedBound, err)
			}
			p, err := c.Fetch(t.Context(), "t", FetchOptions{})
			if err != nil || p.Skipped != tc.count {
				t.Fatalf("Fetch: skipped %d, %v", p.Skipped, err)
			}
			f := c.NewFetcher("t", FetchOptions{})
			fp, err := f.Next(t.Context())
			f.Close()
			if err != nil || fp.Skipped != tc.count {
				t.Fatalf("Fetcher: skipped %d, %v", fp.Skipped, err)
			}
			g, err := c.DescribeGroup(t.Context(), "t", "g")
			if want := min(tc.count, 3); err != nil || g.Skipped != want {
				t.Fatalf("group: skipped %d, want %d, %v", g.Skipped, want, err)
			}
			node.mu.Lock()
			defer node.mu.Unlock()
			for _, fl := range append(node.fetchFlags, node.groupFlags...) {
				if fl != tc.flags {
					t.Fatalf("flags sent: fetch %v, describe %v; want %d", node.fetchFlags, node.groupFlags, tc.flags)
				}
			}
			if len(node.fetchFlags) < 3 || len(node.groupFlags) != 1 {
				t.Fatalf("requests: %d fetches, %d describes", len(node.fetchFlags), len(node.groupFlags))
			}
		})
	}
}
