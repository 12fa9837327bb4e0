package replica

import (
	"cmp"
	"slices"

	"github.com/malachi-log/malachi/internal/replication"
)

// fenceGraceTicks is how many resend ticks a failover waits, once enough
// replicas answered its fence, for the others: with every answer the
// seal lands on an end a quorum of copies holds (quorumEnd). A replica
// that does not answer within it (down, cut off) is left unknown and the
// failover decides without it, as before.
const fenceGraceTicks = 4

// quorumEnd narrows f, replication.FailoverEnd of answers, to the lowest
// end that still covers every acknowledged record: the k-th highest
// answer, k being the quorum less the replicas that did not answer.
//
// Why not the highest answer: every acknowledged record was fsynced by a
// quorum of the copies before its ack (W1), so at least k answering
// copies hold it, and the k-th highest answer is at or above it (W6).
// What lies above that end is on fewer copies than a quorum, so it was
// never acknowledged. Sealing at the highest answer instead keeps that
// unacknowledged tail, held maybe by one copy alone (a failed primary's
// fsynced tail): the seal then makes the copies that answered lower
// "behind", which are never served and never healed from, and losing
// the one node holding the tail loses the acknowledged prefix with it.
// With every replica answered, k is the quorum and the sealed end is on
// a quorum of copies, as a roll's is. With only the answers FailoverEnd
// needs, k is 1 and nothing changes.
//
// An answer flagged Unknown (a copy the fence created: the node held
// none, maybe because its disk was replaced after it acknowledged
// records) witnesses nothing: it lowers k as a silent replica does, and
// its node is only ever Behind. Counting its end would let an empty copy
// pull the k-th highest answer below acknowledged records.
//
// Source becomes the first replica, in replica-set order, whose answer
// reaches the end; Behind those below it. Unknown is unchanged.
func quorumEnd(replicas []uint64, answers []replication.Answer, f replication.Failover) replication.Failover {
	best := map[uint64]uint64{}
	blind := map[uint64]uint64{} // nodes whose answers are all Unknown
	for _, a := range answers {
		if a.Role != replication.RoleFollower || !slices.Contains(replicas, a.Node) {
			continue
		}
		if a.Unknown {
			blind[a.Node] = max(blind[a.Node], a.End)
			continue
		}
		best[a.Node] = max(best[a.Node], a.End)
	}
	for node := range best {
		delete(blind, node) // a counted answer from the node stands
	}
	k := replication.Quorum(len(replicas)) - len(f.Unknown) - len(blind)
	if k <= 1 || len(best) < k {
		return f
	}
	ends := make([]uint64, 0, len(best))
	for _, e := range best {
		ends = append(ends, e)
	}
	slices.SortFunc(ends, func(a, b uint64) int { return cmp.Compare(b, a) })
	out := replication.Failover{End: ends[k-1], Unknown: f.Unknown}
	for _, node := range replicas {
		e, ok := best[node]
		if b, isBlind := blind[node]; isBlind && b < out.End {
			out.Behind = append(out.Behind, node)
			continue
		}
		switch {
		case !ok:
		case e >= out.End && out.Source == 0:
			out.Source = node
		case e < out.End:
			out.Behind = append(out.Behind, node)
		}
	}
	return out
}
