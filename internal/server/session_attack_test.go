package server

import (
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// TestTLSTokenSeenInTheClearStillResumes: a token issued over TLS is
// refused on a plaintext connection, which docs/security.md and the test
// of it present as keeping the token from crossing the network in the
// clear. The refusal comes after the token has crossed it: anyone who
// watched that plaintext connection replays the token over TLS (no client
// certificate needed) and is logged in as its user, and can renew it for
// up to SessionMaxAge.
func TestTLSTokenSeenInTheClearStillResumes(t *testing.T) {
	ts := newTLSSetup(t)
	n := startAuthNode(t, broker.Config{}, ts.scfg)
	c := n.dialTLS(t, ts.client())
	var tok wire.TokenResponse
	if err := tok.Decode(c.ok(1, &wire.AuthRequest{User: str("app"), Password: str("app123")})); err != nil {
		t.Fatal(err)
	}
	// A misconfigured client sends it in the clear; the node refuses it.
	n.refusedResume(t, tok.Token, wire.ReasonTLSRequired)

	// Someone on the path replays what they saw, over TLS.
	a := n.dialTLS(t, ts.client()).sessionAuth(t, 1, &wire.SessionAuthRequest{Token: &tok.Token})
	if a.reason == "" {
		t.Fatalf("a token that was sent in the clear still logs in over TLS (resumed %v, renewed until %d)", a.resp.Resumed, a.resp.ExpiresMs)
	}
}
