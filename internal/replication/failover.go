package replication

import (
	"fmt"
	"slices"
)

// Answer is one replica's fence answer: Node's fenced copy has fsynced
// everything below End and will ack nothing above it. Role is the
// FenceAnswer's: a primary's answer is never counted.
type Answer struct {
	Node, End uint64
	Role      Role
	// Unknown: the FenceAnswer's flag. FailoverEnd counts the answer; a
	// narrowing to a quorum's end must not (it is no witness of what the
	// node acknowledged).
	Unknown bool
}

// Failover is the seal a failover may record.
type Failover struct {
	// End is the sealed end: the highest answer.
	End uint64
	// Source is a replica that answered End, the first in replica-set
	// order: the copy the others catch up from.
	Source uint64
	// Behind are the replicas that answered below End, in replica-set
	// order; they must catch up to it (or be replaced).
	Behind []uint64
	// Unknown are the replicas that have not answered; their copies may
	// hold an unacknowledged suffix above End, which Follower.Truncate
	// cuts once the seal is recorded.
	Unknown []uint64
}

// AnswersNeeded is how many fence answers a failover needs: any rf-quorum+1
// replicas include one of every quorum, so one of them fsynced each
// acknowledged record (W6).
func AnswersNeeded(rf, quorum int) int { return rf - quorum + 1 }

// FailoverEnd decides the seal of a segment whose primary failed, from the
// fence answers of its replicas (Follower.Fence). ok is false while fewer
// than AnswersNeeded distinct replicas of the set answered: no end is
// safe yet. Answers from nodes outside the set are an error; a node that
// answered twice counts once, with its higher answer.
//
// quorum must be Quorum(len(replicas)), the majority every Primary
// commits on: a larger one would ask for too few answers, and the seal
// could fall below an acknowledged record (W6); any other is refused.
//
// The answers must come from fenced Followers, whose votes stop at their
// answer. The failed primary answers only once restarted, as a Follower
// over its recovered store; a primary's own Fence answers everything it
// appended, fsynced or not, and is for a roll, not for this: an answer
// whose Role is RolePrimary (a primary that is in fact alive) is not
// counted, and its node is listed as Unknown.
func FailoverEnd(replicas []uint64, quorum int, answers []Answer) (f Failover, ok bool, err error) {
	rf := len(replicas)
	if rf == 0 || quorum != Quorum(rf) {
		return Failover{}, false, fmt.Errorf("%w: quorum %d of %d replicas, want the majority %d", ErrInvalidConfig, quorum, rf, Quorum(rf))
	}
	best := make([]uint64, rf)
	answered := make([]bool, rf)
	for _, a := range answers {
		i := slices.Index(replicas, a.Node)
		if i < 0 {
			return Failover{}, false, fmt.Errorf("%w: an answer from node %d, not a replica", ErrInvalidConfig, a.Node)
		}
		if a.Role != RoleFollower {
			continue
		}
		best[i], answered[i] = max(best[i], a.End), true
	}
	got := 0
	for i, node := range replicas {
		if !answered[i] {
			f.Unknown = append(f.Unknown, node)
			continue
		}
		got++
		if got == 1 || best[i] > f.End {
			f.End, f.Source = best[i], node
		}
	}
	if got < AnswersNeeded(rf, quorum) {
		return Failover{}, false, nil
	}
	for i, node := range replicas {
		if answered[i] && best[i] < f.End {
			f.Behind = append(f.Behind, node)
		}
	}
	return f, true, nil
}
