package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestSessionLifecycle(t *testing.T) {
	s := NewSessions(1000, 10)
	perms := []string{"produce"}
	tok, err := s.Create("alice", perms, 5000)
	if err != nil {
		t.Fatal(err)
	}
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
	a1, _ := s.Create("alice", nil, 0)
	a2, _ := s.Create("alice", nil, 0)
	b, _ := s.Create("bob", nil, 0)
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
	for i := range 3 {
		if _, err := s.Create("u", nil, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create("u", nil, 99); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("fourth session: %v", err)
	}
	// At 100 the first session has expired and makes room.
	if _, err := s.Create("u", nil, 100); err != nil {
		t.Fatalf("create after expiry: %v", err)
	}
	if n := s.Reap(101); n != 1 {
		t.Fatalf("Reap(101) = %d, want 1", n)
	}
	if n := s.Reap(1000); n != 2 || s.Len() != 0 {
		t.Fatalf("Reap(1000) = %d, Len %d", n, s.Len())
	}
}

func TestSessionOrderStaysBounded(t *testing.T) {
	s := NewSessions(1<<40, 4)
	for i := range 100 {
		tok, err := s.Create("u", nil, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		s.Revoke(tok)
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
				tok, err := s.Create(user, nil, int64(i))
				if err != nil {
					t.Error(err)
					return
				}
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
