package broker

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// A topic deleted by a command this node never handled (a cluster node
// whose queue of applied commands overflowed, or that was restored from a
// snapshot) leaves a head writing its active segment and the files of its
// segments. The resync's sweep fences and retires the head and deletes
// those files, and keeps every file of a topic that still exists.
func TestResyncDropsWhatADeleteMissedHere(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, topic := range []string{"gone", "kept"} {
		if err := b.CreateTopic(ctx, topic, 0, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Produce(ctx, topic, []Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.SplitRange(ctx, "gone", 0); err != nil { // a sealed segment too
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "gone", []Record{{Key: []byte("k"), Value: []byte("w")}}); err != nil {
		t.Fatal(err)
	}
	goneID, _ := b.topicID("gone")
	keptID, _ := b.topicID("kept")
	goneSegs, keptSegs := b.segmentsOf(goneID), b.segmentsOf(keptID)
	if len(goneSegs) != 2 || len(keptSegs) != 1 {
		t.Fatalf("segments: %v of gone, %v of kept", goneSegs, keptSegs)
	}
	// The delete, applied behind the broker's back.
	if _, err := b.plane.Apply(ctx, metadata.Command{V: 1, Kind: metadata.KindDeleteTopic, Topic: "gone", Now: b.nowMs()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Info(storage.SegmentID(goneSegs[0])); err != nil {
		t.Fatalf("before the sweep the deleted topic's file should still be here: %v", err)
	}
	b.mu.Lock()
	heads := make([]*head, 0, len(b.mu.heads))
	for _, h := range b.mu.heads {
		heads = append(heads, h)
	}
	b.mu.Unlock()
	b.dropDeleted(heads)

	for _, id := range goneSegs {
		if _, err := b.store.Info(storage.SegmentID(id)); err == nil {
			t.Errorf("segment %d of the deleted topic is still in the store", id)
		}
	}
	for _, id := range keptSegs {
		if _, err := b.store.Info(storage.SegmentID(id)); err != nil {
			t.Errorf("segment %d of the kept topic: %v", id, err)
		}
	}
	for _, h := range heads {
		h.mu.Lock()
		if h.topicID == goneID && !h.retired {
			t.Errorf("the head of range %d of the deleted topic is not retired", h.rangeID)
		}
		h.mu.Unlock()
	}
	if _, err := b.Produce(ctx, "kept", []Record{{Key: []byte("k"), Value: []byte("x")}}); err != nil {
		t.Fatalf("produce to the kept topic after the sweep: %v", err)
	}
}

// segmentsOf lists the ids of a topic's segments in the metadata.
func (b *Broker) segmentsOf(topicID uint64) []uint64 {
	var ids []uint64
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		t, _ := st.TopicByID(topicID)
		for _, r := range t.Ranges {
			for _, s := range st.RangeSegments(r) {
				ids = append(ids, s.ID)
			}
		}
	})
	return ids
}

// A user deleted and created again under the same name, changes this node
// saw only together (one refresh after both), is a new user: an identity
// of the first one, issued as a certificate login issues it, is refused.
func TestUserCreatedAgainBetweenRefreshesRevokesTheOldIdentity(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateUser(ctx, "bob", "bob-password-1", []string{"produce"}); err != nil {
		t.Fatal(err)
	}
	p := b.authn.principal("bob")
	old := Identity{User: "bob", Method: MethodMTLS, Perms: p.perms, gen: p.created, cred: p.fingerprint}
	if err := b.CheckIdentity(old); err != nil {
		t.Fatalf("the identity before any change: %v", err)
	}
	for _, cmd := range []metadata.Command{
		{V: 1, Kind: metadata.KindDeleteUser, User: "bob", Now: b.nowMs()},
		{V: 1, Kind: metadata.KindCreateUser, User: "bob", PasswordHash: p.hash, Perms: []string{"produce"}, Now: b.nowMs()},
	} {
		if _, err := b.plane.Apply(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	b.refreshPrincipals()
	if err := b.CheckIdentity(old); !errors.Is(err, ErrCredentials) {
		t.Fatalf("an identity of the user deleted and created again: %v, want %v", err, ErrCredentials)
	}
	np := b.authn.principal("bob")
	fresh := Identity{User: "bob", Method: MethodMTLS, Perms: np.perms, gen: np.created, cred: np.fingerprint}
	if err := b.CheckIdentity(fresh); err != nil {
		t.Fatalf("an identity of the new user: %v", err)
	}
}
