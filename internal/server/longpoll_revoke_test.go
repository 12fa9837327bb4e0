package server

import (
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// TestLongPollDoesNotOutliveDelete: a long poll admitted before its user
// is deleted must not hand over records written after the delete was
// answered.
func TestLongPollDoesNotOutliveDelete(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("secrets")})
	admin.ok(3, createUserReq("temp", "temp-pass", "consume"))
	r := n.login(t, "temp", "temp-pass")
	c := connOf(t, n.s, "temp")
	before := c.admitted.Load()
	r.send(9, &wire.FetchRequest{Topic: str("secrets"), Max: 10, WaitMs: 10_000})
	waitFor(t, "the long poll to be admitted", func() {}, func() bool { return c.admitted.Load() > before })
	admin.ok(4, &wire.DeleteUserRequest{User: str("temp")})
	admin.ok(5, produceReq("secrets", "written-after-the-delete"))
	corr, payload, reason, err := r.recv()
	if err != nil {
		t.Fatal(err)
	}
	var fr wire.FetchResponse
	if reason == "" {
		if err := fr.Decode(payload); err != nil {
			t.Fatal(err)
		}
	}
	if corr == 9 && reason == "" && len(fr.Records) > 0 {
		t.Fatalf("the deleted user's long poll got %q, written after the delete was answered", fr.Records[0].Value)
	}
}

// connOf returns the server's connection logged in as user.
func connOf(t *testing.T, s *Server, user string) *conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.mu.conns {
		if c.identity().User == user {
			return c
		}
	}
	t.Fatalf("no connection of %s", user)
	return nil
}
