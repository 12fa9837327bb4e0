package client_test

// End-to-end tests of group inspection and administration: lag across
// splits, unknown groups, seeking and deleting a group's position.

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
)

// keyed returns n records with distinct keys, so after a split both
// children hold some of the parent's records.
func keyed(n int) []client.Record {
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: value(i)}
	}
	return recs
}

// A sealed parent's unread records are counted once, in the child whose
// slice holds their keys, not once per child.
func TestGroupLagAfterSplitCountsParentOnce(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "lag")
	produce(t, c, "lag", keyed(5)...)
	page, err := c.Fetch(t.Context(), "lag", client.FetchOptions{Max: 1})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("fetch 1: %d records, %v", len(page.Records), err)
	}
	cur := page.Cursor
	if err := c.Commit(t.Context(), "lag", client.CommitOptions{Group: "g", Cursor: cur}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SplitRange(t.Context(), "lag", 0); err != nil {
		t.Fatal(err)
	}
	g, err := c.DescribeGroup(t.Context(), "lag", "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.Lag != 4 {
		t.Fatalf("lag after split = %d (ranges %+v), want 4", g.Lag, g.Ranges)
	}
	var sum uint64
	for _, r := range g.Ranges {
		sum += r.Lag
	}
	if sum != g.Lag || len(g.Ranges) != 2 {
		t.Fatalf("ranges %+v do not add up to lag %d", g.Ranges, g.Lag)
	}
	// Records produced into the children count too, exactly.
	produce(t, c, "lag", keyed(3)...)
	if g, err = c.DescribeGroup(t.Context(), "lag", "g"); err != nil || g.Lag != 7 {
		t.Fatalf("lag after 3 more = %d, %v; want 7", g.Lag, err)
	}
	// Reading everything brings the lag to zero.
	_, end := fetchN(t, c, "lag", cur, 7)
	if err := c.Commit(t.Context(), "lag", client.CommitOptions{Group: "g", Cursor: end}); err != nil {
		t.Fatal(err)
	}
	if g, err = c.DescribeGroup(t.Context(), "lag", "g"); err != nil || g.Lag != 0 {
		t.Fatalf("lag after reading all = %d, %v; want 0", g.Lag, err)
	}
}

func TestDescribeUnknownGroupIsNotFound(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "ug")
	produce(t, c, "ug", keyed(5)...)
	if _, err := c.DescribeGroup(t.Context(), "ug", "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("describe unknown group: err = %v, want ErrNotFound", err)
	}
	if _, err := c.DescribeGroup(t.Context(), "missing", "nobody"); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("describe group of missing topic: err = %v, want ErrNoSuchTopic", err)
	}
}

// A seek moves a group's position anywhere, backwards too; a delete
// removes it; neither runs under live members, whom describe lists.
func TestGroupSeekDeleteAndMembers(t *testing.T) {
	n, c := start(t)
	createTopic(t, c, "gs", client.WithRanges(2))
	createTopic(t, c, "other")
	produce(t, c, "gs", keyed(6)...)
	_, end := fetchN(t, c, "gs", "", 6)
	if err := c.Commit(t.Context(), "gs", client.CommitOptions{Group: "g", Cursor: end}); err != nil {
		t.Fatal(err)
	}
	lag := func(want uint64) {
		t.Helper()
		g, err := c.DescribeGroup(t.Context(), "gs", "g")
		if err != nil || g.Lag != want {
			t.Fatalf("lag = %d, %v; want %d", g.Lag, err, want)
		}
	}
	lag(0)

	// Back to the start: a commit could never do this.
	if err := c.SeekGroup(t.Context(), "gs", "g", ""); err != nil {
		t.Fatal(err)
	}
	lag(6)
	page, err := c.Fetch(t.Context(), "gs", client.FetchOptions{Group: "g", Max: 100})
	if err != nil || len(page.Records) != 6 {
		t.Fatalf("group fetch after seek: %d records, %v", len(page.Records), err)
	}
	// Forward to the end, with a cursor minted elsewhere.
	endCur, err := c.EndCursor(t.Context(), "gs")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SeekGroup(t.Context(), "gs", "g", endCur); err != nil {
		t.Fatal(err)
	}
	lag(0)
	otherCur, err := c.EndCursor(t.Context(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SeekGroup(t.Context(), "gs", "g", otherCur); !errors.Is(err, client.ErrInvalidCursor) {
		t.Fatalf("seek to another topic's cursor: err = %v", err)
	}
	// Seeking creates a group that never committed.
	if err := c.SeekGroup(t.Context(), "gs", "fresh", ""); err != nil {
		t.Fatal(err)
	}
	if g, err := c.DescribeGroup(t.Context(), "gs", "fresh"); err != nil || g.Lag != 6 {
		t.Fatalf("fresh group: %+v, %v", g, err)
	}
	producer := n.Client(t, "producer", "producer123")
	if err := producer.SeekGroup(t.Context(), "gs", "g", ""); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("seek without consume: err = %v", err)
	}
	consumer := n.Client(t, "consumer", "consumer123")
	if err := consumer.SeekGroup(t.Context(), "gs", "g", endCur); err != nil {
		t.Fatalf("seek with consume: %v", err)
	}

	// A live member: describe lists it; seek and delete are refused.
	if _, err := c.Fetch(t.Context(), "gs", client.FetchOptions{Group: "g", Member: "m1", Max: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := c.DescribeGroupMembers(t.Context(), "gs", "g")
	if err != nil {
		t.Fatal(err)
	}
	if m.Generation == 0 || len(m.Members) != 1 || m.Members[0].Name != "m1" || len(m.Members[0].Ranges) != 2 || m.Members[0].LastSeen.IsZero() {
		t.Fatalf("members: %+v", m)
	}
	if err := c.SeekGroup(t.Context(), "gs", "g", ""); !errors.Is(err, client.ErrGroupHasMembers) {
		t.Fatalf("seek under a live member: err = %v", err)
	}
	if err := c.DeleteGroup(t.Context(), "gs", "g"); !errors.Is(err, client.ErrGroupHasMembers) {
		t.Fatalf("delete under a live member: err = %v", err)
	}
	if err := c.LeaveGroup(t.Context(), "gs", "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if m, err := c.DescribeGroupMembers(t.Context(), "gs", "g"); err != nil || len(m.Members) != 0 {
		t.Fatalf("members after leave: %+v, %v", m, err)
	}

	if err := c.DeleteGroup(t.Context(), "gs", "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeGroup(t.Context(), "gs", "g"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("describe after delete: err = %v", err)
	}
	if err := c.DeleteGroup(t.Context(), "gs", "g"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete twice: err = %v", err)
	}
	if _, err := c.DescribeGroupMembers(t.Context(), "gs", "g"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("members of a deleted group: err = %v", err)
	}
	groups, err := c.ListGroups(t.Context(), "gs")
	if err != nil || !slices.Equal(groups, []string{"fresh"}) {
		t.Fatalf("groups after delete: %v, %v", groups, err)
	}
}
