package replica

import (
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/replication"
)

// TestQuorumEnd holds the failover's end to what a quorum of the answers
// covers: never below an acknowledged record (a quorum fsynced it), and
// never resting on a tail only copies short of a quorum hold.
func TestQuorumEnd(t *testing.T) {
	ids := []uint64{1, 2, 3}
	five := []uint64{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name     string
		replicas []uint64
		answers  []replication.Answer
		end      uint64
		source   uint64
		behind   []uint64
	}{
		{"all answered, the failed primary ahead", ids,
			[]replication.Answer{{Node: 1, End: 152}, {Node: 2, End: 149}, {Node: 3, End: 147}}, 149, 1, []uint64{3}},
		{"all answered, equal", ids,
			[]replication.Answer{{Node: 1, End: 9}, {Node: 2, End: 9}, {Node: 3, End: 9}}, 9, 1, nil},
		{"only the answers needed: the highest", ids,
			[]replication.Answer{{Node: 1, End: 152}, {Node: 3, End: 147}}, 152, 1, []uint64{3}},
		{"a live primary's answer does not count", ids,
			[]replication.Answer{{Node: 1, End: 152, Role: replication.RolePrimary}, {Node: 2, End: 149}, {Node: 3, End: 147}}, 149, 2, []uint64{3}},
		{"five, one unknown: the second highest", five,
			[]replication.Answer{{Node: 1, End: 50}, {Node: 2, End: 40}, {Node: 3, End: 30}, {Node: 4, End: 20}}, 40, 1, []uint64{3, 4}},
		{"five, all: the third highest", five,
			[]replication.Answer{{Node: 1, End: 50}, {Node: 2, End: 40}, {Node: 3, End: 30}, {Node: 4, End: 20}, {Node: 5, End: 10}}, 30, 1, []uint64{4, 5}},
		{"copies the fence created witness nothing", ids,
			[]replication.Answer{{Node: 1, End: 3}, {Node: 2, End: 0, Unknown: true}, {Node: 3, End: 0, Unknown: true}}, 3, 1, []uint64{2, 3}},
		{"one created copy lowers k like a silent replica", five,
			[]replication.Answer{{Node: 1, End: 50}, {Node: 2, End: 40}, {Node: 3, End: 30}, {Node: 4, End: 0, Unknown: true}, {Node: 5, End: 10}}, 40, 1, []uint64{3, 4, 5}},
	} {
		f, ok, err := replication.FailoverEnd(tc.replicas, replication.Quorum(len(tc.replicas)), tc.answers)
		if err != nil || !ok {
			t.Fatalf("%s: FailoverEnd: %v, %v", tc.name, ok, err)
		}
		got := quorumEnd(tc.replicas, tc.answers, f)
		if got.End != tc.end || got.Source != tc.source || !slices.Equal(got.Behind, tc.behind) || !slices.Equal(got.Unknown, f.Unknown) {
			t.Errorf("%s: end %d source %d behind %v unknown %v; want %d, %d, %v, %v",
				tc.name, got.End, got.Source, got.Behind, got.Unknown, tc.end, tc.source, tc.behind, f.Unknown)
		}
	}
}
