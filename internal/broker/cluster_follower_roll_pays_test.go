package broker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
)

// rollPays rolls a segment off a lost follower only where the roll can
// do good: a failover where the live copies make no quorum but can give
// the answers it needs, an ordinary roll where a quorum lives and a
// spare node could take the lost one's place. Three replicas with two
// lost is left alone: its failover could only fail, each attempt
// dropping a primary that would carry on once a follower returned.
func TestRollPaysOnlyWhereTheRollCanSucceed(t *testing.T) {
	seg := func(ids ...uint64) metadata.Segment {
		var names []string
		for _, id := range ids {
			names = append(names, fmt.Sprintf("node-%d", id))
		}
		return metadata.Segment{Replicas: names, Active: true}
	}
	lostOf := func(ids ...uint64) func(uint64) bool { return func(n uint64) bool { return slices.Contains(ids, n) } }
	spare := func(has bool) func(metadata.Segment) bool { return func(metadata.Segment) bool { return has } }
	for _, c := range []struct {
		name  string
		seg   metadata.Segment
		lost  []uint64
		spare bool
		want  bool
	}{
		{"two replicas, follower lost, no spare", seg(1, 2), []uint64{2}, false, true},
		{"two replicas, follower lost, a spare", seg(1, 2), []uint64{2}, true, true},
		{"three replicas, one lost, a spare", seg(1, 2, 3), []uint64{3}, true, true},
		{"three replicas, one lost, no spare", seg(1, 2, 3), []uint64{3}, false, false},
		{"three replicas, two lost", seg(1, 2, 3), []uint64{2, 3}, true, false},
		{"five replicas, two lost, a spare", seg(1, 2, 3, 4, 5), []uint64{4, 5}, true, true},
		{"five replicas, three lost", seg(1, 2, 3, 4, 5), []uint64{3, 4, 5}, true, false},
		{"five replicas, two lost, no spare", seg(1, 2, 3, 4, 5), []uint64{4, 5}, false, false},
	} {
		if got := rollPays(c.seg, lostOf(c.lost...), spare(c.spare)); got != c.want {
			t.Errorf("%s: rollPays %v, want %v", c.name, got, c.want)
		}
	}
}
