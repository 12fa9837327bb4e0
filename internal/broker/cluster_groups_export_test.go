package broker

import "github.com/malachi-log/malachi/internal/metadata"

// MemberRanges is a member's poll without the read: it joins or keeps
// the member alive and answers its generation and ranges, as a group
// fetch would before reading.
func (b *Broker) MemberRanges(topic, group, member string) (uint64, []uint64, error) {
	id, err := b.topicID(topic)
	if err != nil {
		return 0, nil, err
	}
	var ranges []uint64
	_ = b.plane.ViewTopic(id, func(st *metadata.State) { ranges = activeIDs(st, id) })
	a, _, err := b.memberAssignment(id, group, member, "", ranges)
	return a.Generation, a.Ranges, err
}

// HoldGroupCalls takes every free group call slot of this node towards
// node, as calls in flight would, until release is called.
func (b *Broker) HoldGroupCalls(node uint64) (release func()) {
	t := &b.cluster.coords
	n := 0
	for t.acquire(node) {
		n++
	}
	return func() {
		for range n {
			t.release(node)
		}
	}
}

// GroupCallsRefused counts the group calls this node refused at its
// bound of calls in flight to one node.
func (b *Broker) GroupCallsRefused() uint64 {
	t := &b.cluster.coords
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refused
}
