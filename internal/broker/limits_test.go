package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
)

var (
	producerID = Identity{User: "producer", Perms: []string{"produce"}}
	otherID    = Identity{User: "other", Perms: []string{"produce", "consume"}}
	adminID    = Identity{User: "admin", Perms: []string{"admin"}}
)

func openLimited(t *testing.T, l Limits) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: t.TempDir(), SegmentMaxBytes: 4 << 10, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// metaBytes is the node's metadata, for "a refusal changed nothing".
func metaBytes(t *testing.T, b *Broker) []byte {
	t.Helper()
	var out []byte
	var err error
	b.meta.View(func(st *metadata.State) { out, err = st.Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// refusedQuota wants ErrQuotaExceeded and unchanged metadata.
func refusedQuota(t *testing.T, b *Broker, what string, f func() error) {
	t.Helper()
	before := metaBytes(t, b)
	err := f()
	if !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("%s: %v, want quota_exceeded", what, err)
	}
	if err.Error() == ErrQuotaExceeded.Error() {
		t.Errorf("%s: the refusal does not say which limit: %v", what, err)
	}
	if !bytes.Equal(before, metaBytes(t, b)) {
		t.Fatalf("%s: refused, but the metadata changed", what)
	}
}

func TestProducerTopicQuota(t *testing.T) {
	b := openLimited(t, Limits{MaxTopicsPerUser: 3})
	ctx := context.Background()
	for i := range 3 {
		if err := b.CreateTopicAs(ctx, producerID, fmt.Sprint("t", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	refusedQuota(t, b, "fourth topic", func() error { return b.CreateTopicAs(ctx, producerID, "t3", 0, 0) })
	// The share is the user's: others, and administrators, go on.
	if err := b.CreateTopicAs(ctx, otherID, "o", 0, 0); err != nil {
		t.Fatalf("another user: %v", err)
	}
	for i := range 5 {
		if err := b.CreateTopicAs(ctx, adminID, fmt.Sprint("a", i), 0, 0); err != nil {
			t.Fatalf("admin: %v", err)
		}
	}
	d, _ := b.DescribeTopic("t0")
	if d.Owner != "producer" {
		t.Fatalf("owner %q, want producer", d.Owner)
	}
	// Deleting one of its topics gives the user room again.
	if err := b.DeleteTopic(ctx, "t0"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopicAs(ctx, producerID, "t3", 0, 0); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if err := b.CreateTopicAs(ctx, Identity{Perms: []string{"produce"}}, "anon", 0, 0); !errors.Is(err, ErrPermission) {
		t.Fatalf("identity without a user: %v", err)
	}
}

func TestNodeTopicQuota(t *testing.T) {
	b := openLimited(t, Limits{MaxTopics: 2, MaxTopicsPerUser: 2})
	ctx := context.Background()
	b.CreateTopicAs(ctx, producerID, "a", 0, 0)
	b.CreateTopic(ctx, "b", 0, 0)
	refusedQuota(t, b, "admin past the node's limit", func() error { return b.CreateTopicAs(ctx, adminID, "c", 0, 0) })
	refusedQuota(t, b, "the node's own create", func() error { return b.CreateTopic(ctx, "c", 0, 0) })
}

// A non-admin may not start a topic with 1024 ranges, nor pass its range
// share or the node's; each refusal changes nothing.
func TestInitialRangeAndRangeQuotas(t *testing.T) {
	b := openLimited(t, Limits{MaxRanges: 2500, MaxRangesPerUser: 1500})
	ctx := context.Background()
	refusedQuota(t, b, "1024 initial ranges", func() error { return b.CreateTopicAs(ctx, producerID, "big", 12, 1024) })
	if err := b.CreateTopicAs(ctx, producerID, "ok", 12, 64); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopicAs(ctx, adminID, "admin-big", 12, 1024); err != nil {
		t.Fatalf("admin, 1024 ranges: %v", err)
	}
	if err := b.CreateTopicAs(ctx, adminID, "admin-big2", 12, 1024); err != nil {
		t.Fatalf("admin, 1024 more: %v", err)
	}
	// 64 + 2048 of 2500: 512 more would pass the node's limit.
	refusedQuota(t, b, "past the node's ranges", func() error { return b.CreateTopicAs(ctx, adminID, "x", 12, 512) })

	c := openLimited(t, Limits{MaxInitialRanges: 1024, MaxRangesPerUser: 1500})
	if err := c.CreateTopicAs(ctx, producerID, "first", 12, 1024); err != nil {
		t.Fatal(err)
	}
	refusedQuota(t, c, "past the user's ranges", func() error { return c.CreateTopicAs(ctx, producerID, "second", 12, 1024) })
}

// A split past the node's range limit is refused before the range's
// active segment is sealed: nothing changes, in the metadata or the store.
func TestSplitRefusedAtRangeQuota(t *testing.T) {
	b := openLimited(t, Limits{MaxTopics: 2, MaxRanges: 2, MaxTopicsPerUser: 2, MaxRangesPerUser: 2, MaxInitialRanges: 2})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "s", 8, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "s", []Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	segs := len(b.store.List())
	refusedQuota(t, b, "split", func() error { _, err := b.SplitRange(ctx, "s", 0); return err })
	if got := b.store.List(); len(got) != segs || got[0].Sealed {
		t.Fatalf("store changed by a refused split: %+v", got)
	}
	if _, err := b.Produce(ctx, "s", []Record{{Key: []byte("k"), Value: []byte("w")}}); err != nil {
		t.Fatalf("produce after the refusal: %v", err)
	}
}

func TestCommittedGroupsPerTopicQuota(t *testing.T) {
	b := openLimited(t, Limits{MaxGroupsPerTopic: 2})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "g", 8, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "g", []Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	page, err := b.Fetch(ctx, FetchRequest{Topic: "g", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b"} {
		if err := b.Commit(ctx, "g", g, *page.Cursor); err != nil {
			t.Fatal(err)
		}
	}
	refusedQuota(t, b, "third committed group", func() error { return b.Commit(ctx, "g", "c", *page.Cursor) })
}

func TestLimitsValidated(t *testing.T) {
	for _, l := range []Limits{
		{MaxTopics: -1},
		{MaxRangesPerUser: -5},
		{MaxGroupsPerUser: -1},
		{MaxInitialRanges: 2048},
	} {
		_, err := Open(context.Background(), Config{DataDir: t.TempDir(), Limits: l})
		if err == nil || !strings.HasPrefix(err.Error(), "broker: ") {
			t.Errorf("%+v: Open = %v, want a refusal", l, err)
		}
	}
	d := Limits{}.withDefaults()
	if d.MaxTopics != 10_000 || d.MaxRanges != 100_000 || d.MaxTopicsPerUser != 1_000 || d.MaxRangesPerUser != 10_000 ||
		d.MaxInitialRanges != 64 || d.MaxGroupsPerTopic != 1_000 || d.MaxGroupsPerUser != 100 || d.MaxOpenSealedFiles != 256 {
		t.Fatalf("defaults %+v", d)
	}
	if err := d.validate(10_000); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}
