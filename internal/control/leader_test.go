package control

import (
	"errors"
	"testing"
)

// TestLeaderOfNamesOneLeadershipPerTerm: every node names the same leader
// of a vnode, which names itself at its term; once it stops, the others
// agree on a new leader at a higher term. A group the cluster does not
// have is refused.
func TestLeaderOfNamesOneLeadershipPerTerm(t *testing.T) {
	c := threeNodes(t, 2)
	g := VnodeGroup(1)
	agreed := func() (leader, term uint64) {
		c.t.Helper()
		c.waitFor("every node names the leader of "+groupName(g), 2000, func() bool {
			leader, term = 0, 0
			for _, id := range c.ids() {
				l, tm, err := c.node(id).LeaderOf(g)
				if err != nil || l == 0 || (leader != 0 && l != leader) {
					return false
				}
				leader = l
				if id == l {
					term = tm
				}
			}
			return term != 0
		})
		return leader, term
	}
	leader, term := agreed()
	c.stopNode(leader)
	next, nextTerm := agreed()
	if next == leader || nextTerm <= term {
		t.Fatalf("after node %d (term %d) stopped: leader %d at term %d", leader, term, next, nextTerm)
	}
	if _, _, err := c.node(next).LeaderOf(VnodeGroup(40)); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("leader of a group the cluster lacks: %v, want ErrUnknownGroup", err)
	}
}
