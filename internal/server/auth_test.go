package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/wire"
)

func userNames(t *testing.T, c *rawClient, corr uint32) []string {
	t.Helper()
	var resp wire.ListUsersResponse
	if err := resp.Decode(c.ok(corr, &wire.ListUsersRequest{})); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range resp.Users {
		out = append(out, u.User)
	}
	return out
}

// TestDeletedAdminsOpenConnectionIsRefused: deleting a user takes effect
// on its connections already open: the next request is refused with
// invalid_credentials, changes nothing, and the connection is closed.
func TestDeletedAdminsOpenConnectionIsRefused(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, createUserReq("boss", "boss-pass", "admin"))
	boss := n.login(t, "boss", "boss-pass")
	boss.ok(2, createUserReq("intern", "intern-pass", "consume"))

	admin.ok(3, &wire.DeleteUserRequest{User: str("boss")})
	boss.refused(3, createUserReq("mole", "mole-pass", "admin"), wire.ReasonInvalidCredentials)
	boss.closed()
	if names := userNames(t, admin, 4); slices.Contains(names, "mole") {
		t.Fatalf("the deleted admin's connection created a user: %v", names)
	}
	// A user created again under the same name does not revive old
	// connections: their identity belongs to the deleted account.
	other := n.login(t, "intern", "intern-pass")
	admin.ok(5, &wire.DeleteUserRequest{User: str("intern")})
	admin.ok(6, createUserReq("intern", "intern-pass", "consume"))
	other.refused(2, &wire.ListTopicsRequest{}, wire.ReasonInvalidCredentials)
}

// TestPasswordChangeRefusesOpenConnection: a connection that logged in
// with the old password is refused once the password changes.
func TestPasswordChangeRefusesOpenConnection(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	app := n.login(t, "app", "app123")
	app.ok(2, &wire.ListTopicsRequest{})
	admin.ok(2, &wire.ChangePasswordRequest{User: str("app"), NewPassword: str("new-secret")})
	app.refused(3, &wire.ListTopicsRequest{}, wire.ReasonInvalidCredentials)
	app.closed()
	n.login(t, "app", "new-secret").ok(2, &wire.ListTopicsRequest{})
}

// TestRevokedACLStopsFetchAndStream: in strict mode, revoking a consume
// grant stops fetch on a connection already open, and ends a running
// subscription at its next push.
func TestRevokedACLStopsFetchAndStream(t *testing.T) {
	n := startAuthNode(t, broker.Config{ACLStrict: true}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("orders"), Bits: 8})
	admin.ok(3, createUserReq("reader", "reader-pass", "consume"))
	grant := &wire.GrantACLRequest{User: str("reader"), Operation: str("consume"), Pattern: str("orders")}
	admin.ok(4, grant)
	admin.ok(5, produceReq("orders", "one"))

	r := n.login(t, "reader", "reader-pass")
	r.ok(2, fetchReq("orders"))
	sub := n.login(t, "reader", "reader-pass")
	sub.send(7, &wire.SubscribeRequest{Topic: str("orders"), Window: 10})
	if corr, _, reason, err := sub.recv(); corr != 7 || reason != "" || err != nil {
		t.Fatalf("first push: corr %d, reason %q, err %v", corr, reason, err)
	}

	admin.ok(6, &wire.RevokeACLRequest{User: grant.User, Operation: grant.Operation, Pattern: grant.Pattern})
	r.refused(3, fetchReq("orders"), wire.ReasonPermissionDenied)
	r.ok(4, &wire.ListTopicsRequest{}) // the connection itself stays open

	admin.ok(7, produceReq("orders", "two"))
	if corr, _, reason, err := sub.recv(); corr != 7 || reason != wire.ReasonPermissionDenied || err != nil {
		t.Fatalf("push after the revoke: corr %d, reason %q, err %v", corr, reason, err)
	}
	sub.closed()
}

// TestLockoutOverTCP: five wrong passwords lock (user, address); then
// even the right password is answered account_locked, until the lock
// (5 minutes, on the broker's clock) has passed.
func TestLockoutOverTCP(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	for i := range 20 {
		want := wire.ReasonInvalidCredentials
		if i >= 5 {
			want = wire.ReasonAccountLocked
		}
		c := n.dial(t)
		c.refused(1, &wire.AuthRequest{User: str("producer"), Password: str(fmt.Sprint("guess-", i))}, want)
		c.closed()
	}
	c := n.dial(t)
	c.refused(1, &wire.AuthRequest{User: str("producer"), Password: str("producer123")}, wire.ReasonAccountLocked)
	// Other users are not locked.
	n.login(t, "consumer", "consumer123")
	n.clock.Advance(5*time.Minute - time.Millisecond)
	n.dial(t).refused(1, &wire.AuthRequest{User: str("producer"), Password: str("producer123")}, wire.ReasonAccountLocked)
	n.clock.Advance(time.Millisecond)
	n.login(t, "producer", "producer123").ok(2, &wire.ListTopicsRequest{})
}

// TestFailedReauthClosesConnection: a wrong password on an open
// connection counts as a failed login and closes the connection.
func TestFailedReauthClosesConnection(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	c := n.login(t, "app", "app123")
	c.refused(2, &wire.AuthRequest{User: str("admin"), Password: str("guess")}, wire.ReasonInvalidCredentials)
	c.closed()
	// It counted: four more from anywhere on this address lock admin.
	for range 4 {
		n.dial(t).refused(1, &wire.AuthRequest{User: str("admin"), Password: str("guess")}, wire.ReasonInvalidCredentials)
	}
	n.dial(t).refused(1, &wire.AuthRequest{User: str("admin"), Password: str("admin123")}, wire.ReasonAccountLocked)
}

// loginAll opens n connections at once and logs each in as app; it
// returns the refusals.
func loginAll(t *testing.T, node *authNode, n int) []string {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refusals []string
	)
	for range n {
		wg.Go(func() {
			c := node.dial(t)
			c.send(1, &wire.AuthRequest{User: str("app"), Password: str("app123")})
			_, _, reason, err := c.recv()
			if err != nil {
				reason = err.Error()
			}
			if reason != "" {
				mu.Lock()
				refusals = append(refusals, reason)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return refusals
}

// TestConcurrentLoginsRunBoundedHashes: 32 logins at once all succeed,
// with at most HashConcurrency password hashes running at any moment.
func TestConcurrentLoginsRunBoundedHashes(t *testing.T) {
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{HashConcurrency: 2, HashWait: time.Minute}}, Config{})
	if refusals := loginAll(t, n, 32); len(refusals) > 0 {
		t.Fatalf("refused: %v", refusals)
	}
	if st := n.b.AuthStats(); st.HashesPeak < 1 || st.HashesPeak > 2 {
		t.Fatalf("%d hashes ran at once, bound 2", st.HashesPeak)
	}
}

// TestTwentyConnectionsFromOneAddress: the defaults admit a client that
// opens 20 connections at once from one address.
func TestTwentyConnectionsFromOneAddress(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	if refusals := loginAll(t, n, 20); len(refusals) > 0 {
		t.Fatalf("refused: %v", refusals)
	}
}

// TestHashQueueFullIsRateLimited: a login that cannot get a hashing slot
// within HashWait is refused with rate_limit_exceeded.
func TestHashQueueFullIsRateLimited(t *testing.T) {
	n := startAuthNode(t, broker.Config{Clock: clock.Real(), Auth: broker.AuthConfig{HashConcurrency: 1, HashWait: time.Nanosecond}}, Config{})
	refusals := loginAll(t, n, 16)
	if len(refusals) == 0 {
		t.Fatal("16 logins through one hashing slot with no wait: none refused")
	}
	for _, r := range refusals {
		if r != wire.ReasonRateLimitExceeded {
			t.Fatalf("refused with %q", r)
		}
	}
}

// TestReauthDoesNotRaceRequests: re-authenticating while pipelined
// requests run on request goroutines; run with -race.
func TestReauthDoesNotRaceRequests(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	c := n.login(t, "app", "app123")
	c.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	var frames []byte
	const rounds = 20
	for i := range rounds {
		user, pass := "app", "app123"
		if i%2 == 1 {
			user, pass = "admin", "admin123"
		}
		base := uint32(100 + 10*i)
		frames = wire.AppendRequestFrame(frames, base, &wire.AuthRequest{User: &user, Password: &pass})
		for j := range 5 {
			// Each of these checks the identity's permission on t.
			frames = wire.AppendRequestFrame(frames, base+1+uint32(j), &wire.DescribeTopicRequest{Topic: str("t")})
		}
	}
	if _, err := c.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	for range rounds * 6 {
		if _, _, reason, err := c.recv(); reason != "" || err != nil {
			t.Fatalf("reason %q, err %v", reason, err)
		}
	}
}

// TestStrictACLViews: in strict mode a user sees in list_topics and
// status only the topics it may produce to or consume from.
func TestStrictACLViews(t *testing.T) {
	n := startAuthNode(t, broker.Config{ACLStrict: true}, Config{})
	admin := n.login(t, "admin", "admin123")
	for i, topic := range []string{"a.one", "a.two", "b.one"} {
		admin.ok(uint32(10+i), &wire.CreateTopicRequest{Topic: str(topic), Bits: 8})
	}
	admin.ok(20, createUserReq("alice", "alice-pass", "consume"))
	admin.ok(21, &wire.GrantACLRequest{User: str("alice"), Operation: str("consume"), Pattern: str("a.*")})

	alice := n.login(t, "alice", "alice-pass")
	if got := topicNames(t, alice, 2); !slices.Equal(got, []string{"a.one", "a.two"}) {
		t.Fatalf("alice sees %v", got)
	}
	var st wire.StatusResponse
	if err := st.Decode(alice.ok(3, &wire.StatusRequest{})); err != nil {
		t.Fatal(err)
	}
	if st.Topics != 2 || st.DataDir != "" {
		t.Fatalf("alice's status: %d topics, data dir %q", st.Topics, st.DataDir)
	}
	alice.refused(4, &wire.DescribeTopicRequest{Topic: str("b.one")}, wire.ReasonPermissionDenied)
	alice.refused(5, &wire.ListGroupsRequest{Topic: str("b.one")}, wire.ReasonPermissionDenied)
	if got := topicNames(t, admin, 22); len(got) != 3 {
		t.Fatalf("admin sees %v", got)
	}
	// A user with the coarse permission but no grant sees nothing.
	if got := topicNames(t, n.login(t, "consumer", "consumer123"), 2); len(got) != 0 {
		t.Fatalf("consumer without grants sees %v", got)
	}
}

func topicNames(t *testing.T, c *rawClient, corr uint32) []string {
	t.Helper()
	var resp wire.ListTopicsResponse
	if err := resp.Decode(c.ok(corr, &wire.ListTopicsRequest{})); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tp := range resp.Topics {
		out = append(out, tp.Name)
	}
	slices.Sort(out)
	return out
}

// TestAuditLogOverTCP: logins, lockouts, admin operations and refusals
// reach the audit log, with the client's address, and no password does.
func TestAuditLogOverTCP(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{Audit: audit.Config{Path: path}}}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, createUserReq("svc", "svc-secret-pw", "produce"))
	admin.ok(3, &wire.ChangePasswordRequest{User: str("svc"), NewPassword: str("svc-new-secret")})
	admin.ok(4, &wire.GrantACLRequest{User: str("svc"), Operation: str("consume"), Pattern: str("logs.*")})
	for range 5 {
		n.dial(t).refused(1, &wire.AuthRequest{User: str("svc"), Password: str("wrong-guess-pw")}, wire.ReasonInvalidCredentials)
	}
	svc := n.login(t, "consumer", "consumer123")
	svc.refused(2, &wire.DeleteUserRequest{User: str("admin")}, wire.ReasonPermissionDenied)
	n.s.Shutdown(t.Context())
	n.b.Close() // flushes the audit log

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, secret := range []string{"admin123", "svc-secret-pw", "svc-new-secret", "wrong-guess-pw", "consumer123"} {
		if strings.Contains(text, secret) {
			t.Fatalf("the audit log holds the password %q", secret)
		}
	}
	for _, want := range []string{
		`"type":"auth_success","result":"ok","user":"admin","peer":"127.0.0.1","method":"password"`,
		`"type":"user_created","result":"ok","user":"admin"`,
		`"type":"password_changed","result":"ok","user":"admin"`,
		`"type":"acl_granted"`,
		`"type":"auth_failure","result":"refused","user":"svc","peer":"127.0.0.1","method":"password","reason":"invalid_credentials"`,
		`"type":"auth_lockout"`,
		`"type":"permission_denied","result":"refused","user":"consumer"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}
