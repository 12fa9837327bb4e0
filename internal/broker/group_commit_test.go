package broker

// These tests check that the members of one consumer group do not undo each
// other's progress. Each member commits the cursor of its own pages, in
// interleavings a client may produce (A fetches, B fetches, A commits, B
// commits), by fetch and by subscription, and across range splits. No
// member may read again a record it committed, every record must reach
// the group (exactly once where no range changed hands with records
// outstanding), and the group's lag must end at zero.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/groups"
)

// groupLedger records what a group's members were given.
type groupLedger struct {
	t     *testing.T
	b     *Broker
	topic string
	group string
	// exact: a second delivery of a record to the group fails the test.
	exact     bool
	delivered map[string]int             // record id -> deliveries to the group
	committed map[string]map[string]bool // member -> ids in pages it committed
}

func newGroupLedger(t *testing.T, b *Broker, topic, group string, exact bool) *groupLedger {
	return &groupLedger{
		t: t, b: b, topic: topic, group: group, exact: exact,
		delivered: map[string]int{}, committed: map[string]map[string]bool{},
	}
}

func recordID(r Record) string { return string(r.Key) + "/" + string(r.Value) }

// deliver records that member was given recs.
func (l *groupLedger) deliver(member string, recs []Record) []string {
	l.t.Helper()
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		id := recordID(r)
		if l.committed[member][id] {
			l.t.Fatalf("member %s read %s again after committing it", member, id)
		}
		l.delivered[id]++
		if l.exact && l.delivered[id] > 1 {
			l.t.Fatalf("record %s delivered to the group %d times (member %s)", id, l.delivered[id], member)
		}
		ids = append(ids, id)
	}
	return ids
}

// markCommitted records that member committed the page holding ids.
func (l *groupLedger) markCommitted(member string, ids []string) {
	if l.committed[member] == nil {
		l.committed[member] = map[string]bool{}
	}
	for _, id := range ids {
		l.committed[member][id] = true
	}
}

// check asserts that every acknowledged record reached the group (once,
// when exact) and that nothing else did.
func (l *groupLedger) check(acked *ackLog) {
	l.t.Helper()
	acked.mu.Lock()
	defer acked.mu.Unlock()
	want := 0
	for k, seqs := range acked.byKey {
		for _, s := range seqs {
			id := fmt.Sprintf("%s/%d", k, s)
			n := l.delivered[id]
			if n == 0 || l.exact && n != 1 {
				l.t.Fatalf("record %s delivered %d times", id, n)
			}
			want++
		}
	}
	if len(l.delivered) != want {
		l.t.Fatalf("the group was given %d distinct records, %d were produced", len(l.delivered), want)
	}
}

// lag returns the group's lag as DescribeGroup reports it.
func (l *groupLedger) lag() uint64 {
	l.t.Helper()
	st, err := l.b.DescribeGroup(l.topic, l.group)
	if err != nil {
		l.t.Fatalf("describe group: %v", err)
	}
	return st.Lag
}

// fetch reads one page as member and records what it was given.
func (l *groupLedger) fetch(member string, max int) (Page, []string) {
	l.t.Helper()
	g, m := l.group, member
	p, err := l.b.Fetch(context.Background(), FetchRequest{Topic: l.topic, Group: &g, Member: &m, Max: max})
	if err != nil {
		l.t.Fatalf("fetch as %s: %v", member, err)
	}
	return p, l.deliver(member, p.Records)
}

// commit stores the cursor of member's page.
func (l *groupLedger) commit(member string, p Page, ids []string) {
	l.t.Helper()
	if err := l.b.Commit(context.Background(), l.topic, l.group, *p.Cursor); err != nil {
		l.t.Fatalf("commit as %s: %v", member, err)
	}
	l.markCommitted(member, ids)
}

// activeRangeIDs lists a topic's active ranges.
func activeRangeIDs(t *testing.T, b *Broker, topic string) []uint64 {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, r := range d.Ranges {
		if r.Active {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// requireShares fails unless every member is assigned at least one range,
// so an interleaving really has several members reading.
func requireShares(t *testing.T, b *Broker, topic string, members []string) {
	t.Helper()
	for m, rs := range groups.Assign(activeRangeIDs(t, b, topic), members) {
		if len(rs) == 0 {
			t.Fatalf("member %s is assigned no range; pick other names", m)
		}
	}
}

// interleave drains the topic in rounds: every member fetches a page, then
// every member commits its page, in reverse order, so each commit lands
// after the others' fetches. between, if set, runs between a round's
// fetches (after the first member's) and is given the round number.
func interleave(l *groupLedger, members []string, max int, between func(round int)) {
	l.t.Helper()
	for round := 0; ; round++ {
		pages := make([]Page, len(members))
		ids := make([][]string, len(members))
		got := 0
		for i, m := range members {
			pages[i], ids[i] = l.fetch(m, max)
			got += len(ids[i])
			if i == 0 && between != nil {
				between(round)
			}
		}
		for i := len(members) - 1; i >= 0; i-- {
			l.commit(members[i], pages[i], ids[i])
		}
		if got == 0 {
			return
		}
	}
}

// joinAll makes every member join with an empty page, so the assignment
// is settled before any record is read.
func joinAll(l *groupLedger, members []string) {
	l.t.Helper()
	for _, m := range members {
		if p, _ := l.fetch(m, 1); len(p.Records) != 0 {
			l.t.Fatalf("join of %s read %d records", m, len(p.Records))
		}
	}
}

var memberSets = map[string][]string{
	"two":   {"ann", "bob"},
	"three": {"ann", "bob", "cyd"},
}

// TestGroupMembersCommitInterleavedByFetch: A fetches, B fetches, A
// commits, B commits, round after round. B's cursor was taken before A's
// commit, yet committing it must not move A's ranges back.
func TestGroupMembersCommitInterleavedByFetch(t *testing.T) {
	for name, members := range memberSets {
		t.Run(name, func(t *testing.T) {
			b := openTestBroker(t, t.TempDir())
			defer b.Close()
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 8); err != nil {
				t.Fatal(err)
			}
			requireShares(t, b, "t", members)
			l := newGroupLedger(t, b, "t", "g", true)
			joinAll(l, members)
			acked := &ackLog{byKey: map[string][]int{}}
			next := map[string]int{}
			for i := 0; i < 3; i++ {
				produceRound(t, b, "t", 40, next, acked)
				interleave(l, members, 7, nil)
				if lag := l.lag(); lag != 0 {
					t.Fatalf("round %d: group lag %d after every member committed", i, lag)
				}
			}
			l.check(acked)
		})
	}
}

// TestGroupMembersCommitInterleavedAcrossSplits: the same interleaving
// while ranges split. Splitting between rounds, after every commit, keeps
// delivery exact even though the split moves ranges between members.
// Splitting inside a round, between one member's fetch and the others',
// hands ranges over with records outstanding, which may deliver them
// twice to the group, but a member never reads again what it committed.
func TestGroupMembersCommitInterleavedAcrossSplits(t *testing.T) {
	for name, members := range memberSets {
		for _, mid := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mid-round=%v", name, mid), func(t *testing.T) {
				b := openTestBroker(t, t.TempDir())
				defer b.Close()
				ctx := context.Background()
				if err := b.CreateTopic(ctx, "t", 8, 8); err != nil {
					t.Fatal(err)
				}
				requireShares(t, b, "t", members)
				l := newGroupLedger(t, b, "t", "g", !mid)
				joinAll(l, members)
				acked := &ackLog{byKey: map[string][]int{}}
				next := map[string]int{}
				split := func() {
					t.Helper()
					if _, err := b.SplitRange(ctx, "t", 0); err != nil {
						t.Fatal(err)
					}
				}
				var between func(int)
				if mid {
					between = func(round int) {
						if round%3 == 1 {
							split()
						}
					}
				}
				for i := 0; i < 4; i++ {
					produceRound(t, b, "t", 40, next, acked)
					if !mid {
						split()
					}
					produceRound(t, b, "t", 40, next, acked)
					// Small pages leave members part-way through an
					// ancestor's slice when they commit.
					interleave(l, members, 5, between)
				}
				if lag := l.lag(); lag != 0 {
					t.Fatalf("group lag %d after every member committed", lag)
				}
				l.check(acked)
			})
		}
	}
}

// TestGroupStaleMemberCommitDoesNotRewind: a member's range moves to
// another member, which reads on and commits; the first member's late
// commit of a cursor it took before the move must not move the range back.
func TestGroupStaleMemberCommitDoesNotRewind(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	produceRound(t, b, "t", 40, next, acked)
	l := newGroupLedger(t, b, "t", "g", false)
	first, firstIDs := l.fetch("ann", 20)
	l.commit("ann", first, firstIDs)
	late, _ := l.fetch("ann", 20) // read, but committed only after the move
	if err := b.LeaveGroup("t", "g", "ann"); err != nil {
		t.Fatal(err)
	}
	for {
		p, ids := l.fetch("bob", 50)
		l.commit("bob", p, ids)
		if len(ids) == 0 {
			break
		}
	}
	if lag := l.lag(); lag != 0 {
		t.Fatalf("lag %d after bob drained the topic", lag)
	}
	before, err := b.DescribeGroup("t", "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, stale := range []Page{late, first} {
		if err := b.Commit(ctx, "t", "g", *stale.Cursor); err != nil {
			t.Fatalf("late commit: %v", err)
		}
	}
	after, err := b.DescribeGroup("t", "g")
	if err != nil {
		t.Fatal(err)
	}
	if after.Lag != 0 || *after.Cursor != *before.Cursor {
		t.Fatalf("late commits moved the group back: lag %d, cursor changed %v", after.Lag, *after.Cursor != *before.Cursor)
	}
	if p, ids := l.fetch("bob", 50); len(ids) != 0 {
		t.Fatalf("bob re-read %d records after the late commits (%v)", len(ids), p.Records[0])
	}
	l.check(acked)
}

// streamMember is one group member reading by subscription.
type streamMember struct {
	name   string
	sub    *Subscription
	cancel context.CancelFunc
	done   chan error
}

// streamPage is a page pushed to a member.
type streamPage struct {
	m    *streamMember
	page Page
}

// subscribeAll subscribes every member before any runs, so each member's
// first read already sees the whole group, then starts them. Their pages
// arrive on the returned channel.
func subscribeAll(t *testing.T, b *Broker, topic, group string, members []string) ([]*streamMember, chan streamPage) {
	t.Helper()
	out := make(chan streamPage)
	var ms []*streamMember
	for _, name := range members {
		g, n := group, name
		sub, err := b.Subscribe(topic, &g, &n, 40, 7)
		if err != nil {
			t.Fatalf("subscribe %s: %v", name, err)
		}
		ms = append(ms, &streamMember{name: name, sub: sub, done: make(chan error, 1)})
	}
	for _, m := range ms {
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		go func() {
			m.done <- m.sub.Run(ctx, func(p Page) error {
				select {
				case out <- streamPage{m: m, page: p}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}()
	}
	return ms, out
}

// stop ends a member's subscription and waits until it has left the group.
func (m *streamMember) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("subscription of %s: %v", m.name, err)
	}
}

// consumeStream takes pages until the group has been given want records
// more than before, acknowledging each page (which commits it).
func consumeStream(l *groupLedger, pages chan streamPage, want int) {
	l.t.Helper()
	target := len(l.delivered) + want
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for len(l.delivered) < target {
		select {
		case sp := <-pages:
			ids := l.deliver(sp.m.name, sp.page.Records)
			if err := sp.m.sub.Ack(context.Background(), sp.page.Cursor, len(ids)); err != nil {
				l.t.Fatalf("ack: %v", err)
			}
			l.markCommitted(sp.m.name, ids)
		case <-deadline.C:
			l.t.Fatalf("the group was given %d of %d records", len(l.delivered), target)
		}
	}
}

// awaitLagZero waits for the acknowledgements, which a subscription commits
// asynchronously, to bring the group's lag to zero.
func awaitLagZero(l *groupLedger) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		lag := l.lag()
		if lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("group lag stuck at %d after every page was acknowledged", lag)
		}
		<-tick.C
	}
}

// requireNothingLeft asserts that reading from the group's committed
// position finds no record.
func requireNothingLeft(l *groupLedger) {
	l.t.Helper()
	g := l.group
	p, err := l.b.Fetch(context.Background(), FetchRequest{Topic: l.topic, Group: &g, Max: 1000})
	if err != nil {
		l.t.Fatal(err)
	}
	if len(p.Records) != 0 {
		l.t.Fatalf("the group's committed position re-reads %d records, first %s", len(p.Records), recordID(p.Records[0]))
	}
}

// commitEverything drains the topic as the group (no member) and commits,
// so the group has a stored entry for every range.
func commitEverything(l *groupLedger) {
	l.t.Helper()
	g := l.group
	for {
		p, err := l.b.Fetch(context.Background(), FetchRequest{Topic: l.topic, Group: &g, Max: 1000})
		if err != nil {
			l.t.Fatal(err)
		}
		ids := l.deliver("setup", p.Records)
		l.commit("setup", p, ids)
		if len(ids) == 0 {
			return
		}
	}
}

func countAcked(acked *ackLog) int {
	acked.mu.Lock()
	defer acked.mu.Unlock()
	return acked.total
}

// TestGroupMembersCommitInterleavedBySubscription: members subscribe
// where the group already has a committed position and acknowledge their
// pages as they come. A subscription's acknowledgement must not write the
// other members' ranges back to where that subscription started.
func TestGroupMembersCommitInterleavedBySubscription(t *testing.T) {
	for name, members := range memberSets {
		t.Run(name, func(t *testing.T) {
			b := openTestBroker(t, t.TempDir())
			defer b.Close()
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 8); err != nil {
				t.Fatal(err)
			}
			requireShares(t, b, "t", members)
			acked := &ackLog{byKey: map[string][]int{}}
			next := map[string]int{}
			l := newGroupLedger(t, b, "t", "g", true)
			produceRound(t, b, "t", 40, next, acked)
			commitEverything(l)

			ms, pages := subscribeAll(t, b, "t", "g", members)
			defer func() {
				for _, m := range ms {
					m.stop(t)
				}
			}()
			for i := 0; i < 3; i++ {
				before := countAcked(acked)
				produceRound(t, b, "t", 40, next, acked)
				consumeStream(l, pages, countAcked(acked)-before)
			}
			awaitLagZero(l)
			l.check(acked)
			requireNothingLeft(l)
		})
	}
}

// TestGroupSubscriptionTakesOverFromLatestCommit: when a member leaves,
// the subscription that takes its ranges continues from the leaver's last
// commit, not from where the taker's own subscription started.
func TestGroupSubscriptionTakesOverFromLatestCommit(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 8); err != nil {
		t.Fatal(err)
	}
	members := memberSets["two"]
	requireShares(t, b, "t", members)
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	l := newGroupLedger(t, b, "t", "g", true)

	ms, pages := subscribeAll(t, b, "t", "g", members)
	stayer, leaver := ms[0], ms[1]
	defer stayer.stop(t)
	produceRound(t, b, "t", 40, next, acked)
	consumeStream(l, pages, countAcked(acked))
	awaitLagZero(l)
	leaver.stop(t)

	before := countAcked(acked)
	produceRound(t, b, "t", 40, next, acked)
	consumeStream(l, pages, countAcked(acked)-before)
	awaitLagZero(l)
	l.check(acked)
}

// TestGroupSubscriptionsAcrossSplits: subscribed members while ranges
// split. Every split comes after the group committed everything it was
// given, so although the split reassigns ranges, no record reaches the
// group twice: a member given a child range starts from the group's
// latest commit of its ancestors, not from its own subscription's start.
func TestGroupSubscriptionsAcrossSplits(t *testing.T) {
	for name, members := range memberSets {
		t.Run(name, func(t *testing.T) {
			b := openTestBroker(t, t.TempDir())
			defer b.Close()
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 2); err != nil {
				t.Fatal(err)
			}
			acked := &ackLog{byKey: map[string][]int{}}
			next := map[string]int{}
			l := newGroupLedger(t, b, "t", "g", true)
			ms, pages := subscribeAll(t, b, "t", "g", members)
			defer func() {
				for _, m := range ms {
					m.stop(t)
				}
			}()
			for i := 0; i < 5; i++ {
				before := countAcked(acked)
				produceRound(t, b, "t", 40, next, acked)
				consumeStream(l, pages, countAcked(acked)-before)
				awaitLagZero(l)
				if _, err := b.SplitRange(ctx, "t", 0); err != nil {
					t.Fatal(err)
				}
			}
			before := countAcked(acked)
			produceRound(t, b, "t", 40, next, acked)
			consumeStream(l, pages, countAcked(acked)-before)
			awaitLagZero(l)
			l.check(acked)
			requireNothingLeft(l)
		})
	}
}

// TestGroupMemberEntriesKeepOnlyItsRanges: what a subscribed member's ack
// commits is its ranges' entries and its ranges' ancestors' entries
// narrowed to its ranges' slices, nothing of the other members' ranges.
func TestGroupMemberEntriesKeepOnlyItsRanges(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	roots := activeRangeIDs(t, b, "t") // [0, 128) and [128, 256)
	kids, err := b.SplitRange(ctx, "t", roots[0])
	if err != nil {
		t.Fatal(err)
	}
	topicID, err := b.topicID("t")
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, other := kids[0], kids[1], roots[1] // [0, 64), [64, 128), [128, 256)
	e := func(src, start uint64, bits uint8, off uint64) cursor.Entry {
		return cursor.Entry{Source: src, SliceStart: start, SliceBits: bits, Offset: off}
	}
	entries := []cursor.Entry{
		e(roots[0], 0, 7, 10),  // the parent, wide: read before the split
		e(roots[0], 64, 6, 15), // the parent, part-way through hi's slice
		e(lo, 0, 6, 3),
		e(hi, 64, 6, 4),
		e(other, 128, 7, 7),
	}
	tests := []struct {
		name   string
		ranges []uint64
		want   []cursor.Entry
	}{
		{"lo", []uint64{lo}, []cursor.Entry{e(roots[0], 0, 6, 10), e(lo, 0, 6, 3)}},
		{"hi", []uint64{hi}, []cursor.Entry{e(roots[0], 64, 6, 15), e(hi, 64, 6, 4)}},
		{"other", []uint64{other}, []cursor.Entry{e(other, 128, 7, 7)}},
		{"none", []uint64{}, []cursor.Entry{}},
	}
	for _, tt := range tests {
		if got := b.memberEntries(topicID, tt.ranges, entries); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: memberEntries = %v, want %v", tt.name, got, tt.want)
		}
	}
}
