package auth

import (
	"encoding/base64"
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestSessionLifecycle(t *testing.T) {
	s := NewSessions(1000, 10)
	perms := []string{"produce"}
	tok := s.Create("alice", perms, 5000)
	if raw, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(raw) != 32 || len(tok) != TokenLen {
		t.Fatalf("token %q: %v", tok, err)
	}
	perms[0] = "admin" // a session keeps its own copy
	got, ok := s.Lookup(tok, 5999)
	if !ok || got.User != "alice" || !slices.Equal(got.Perms, []string{"produce"}) || got.CreatedAt != 5000 || got.ExpiresAt != 6000 {
		t.Fatalf("Lookup = %+v, %v", got, ok)
	}
	got.Perms[0] = "admin"
	if again, _ := s.Lookup(tok, 5999); again.Perms[0] != "produce" {
		t.Fatal("Lookup leaks the stored permissions")
	}
	if _, ok := s.Lookup(tok, 6000); ok {
		t.Fatal("session valid at its expiry")
	}
	if s.Len() != 0 {
		t.Fatal("expired session not removed by Lookup")
	}
	for _, bad := range []string{"", "x", tok[:TokenLen-1] + "A"} {
		if _, ok := s.Lookup(bad, 0); ok {
			t.Errorf("Lookup(%q) succeeded", bad)
		}
	}
}

func TestSessionRevoke(t *testing.T) {
	s := NewSessions(1000, 10)
	a1 := s.Create("alice", nil, 0)
	a2 := s.Create("alice", nil, 0)
	b := s.Create("bob", nil, 0)
	if a1 == a2 {
		t.Fatal("duplicate token")
	}
	if !s.Revoke(a1) || s.Revoke(a1) {
		t.Fatal("Revoke")
	}
	if n := s.RevokeUser("alice"); n != 1 {
		t.Fatalf("RevokeUser = %d, want 1", n)
	}
	if _, ok := s.Lookup(a2, 1); ok {
		t.Fatal("revoked session still valid")
	}
	if _, ok := s.Lookup(b, 1); !ok {
		t.Fatal("other user's session lost")
	}
}

func TestSessionLimitAndReap(t *testing.T) {
	s := NewSessions(100, 3)
	first := s.Create("u", nil, 0)
	s.Create("v", nil, 1)
	s.Create("w", nil, 2)
	// A full table ends its oldest session rather than refuse a login.
	s.Create("x", nil, 99)
	if _, ok := s.Lookup(first, 99); ok || s.Len() != 3 {
		t.Fatalf("full table: oldest kept %v, %d sessions", ok, s.Len())
	}
	if n := s.Reap(101); n != 1 {
		t.Fatalf("Reap(101) = %d, want 1", n)
	}
	if n := s.Reap(1000); n != 2 || s.Len() != 0 {
		t.Fatalf("Reap(1000) = %d, Len %d", n, s.Len())
	}
}

// TestSessionPerUserBound: one user logging in in a loop ends its own
// oldest sessions and never anyone else's.
func TestSessionPerUserBound(t *testing.T) {
	s := NewSessions(1<<40, 100)
	s.LimitPerUser(4)
	bob := s.Create("bob", nil, 0)
	var mallory []string
	for i := range 1000 {
		mallory = append(mallory, s.Create("mallory", nil, int64(i)))
	}
	if _, ok := s.Lookup(bob, 1000); !ok {
		t.Fatal("another user's session was ended")
	}
	if s.Len() != 5 {
		t.Fatalf("%d sessions held, want bob's 1 and mallory's 4", s.Len())
	}
	for i, tok := range mallory {
		if _, ok := s.Lookup(tok, 1000); ok != (i >= 996) {
			t.Fatalf("mallory's session %d live = %v", i, ok)
		}
	}
	if n := s.RevokeUser("mallory"); n != 4 {
		t.Fatalf("RevokeUser = %d, want 4", n)
	}
}

func TestSessionOrderStaysBounded(t *testing.T) {
	s := NewSessions(1<<40, 4)
	for i := range 100 {
		s.Revoke(s.Create("u", nil, int64(i)))
	}
	if len(s.order) > 2*s.max {
		t.Fatalf("order holds %d entries for %d sessions", len(s.order), s.Len())
	}
}

func TestSessionsConcurrent(t *testing.T) {
	s := NewSessions(1000, 1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			user := fmt.Sprint("u", g)
			for i := range 50 {
				tok := s.Create(user, nil, int64(i))
				if _, ok := s.Lookup(tok, int64(i)); !ok {
					t.Error("fresh session not found")
				}
			}
			s.RevokeUser(user)
		})
	}
	wg.Wait()
	if s.Len() != 0 {
		t.Fatalf("%d sessions left", s.Len())
	}
}
