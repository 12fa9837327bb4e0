package broker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
)

// TestSessionSurvivesRestart: the node keeps no table of tokens, so one
// issued before a restart logs in after it, and costs no hash.
func TestSessionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	mc := clock.NewManual(time.Now())
	cfg := Config{DataDir: dir, Clock: mc, Logger: slog.New(slog.DiscardHandler)}
	b, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	id, err := b.Login(ctx, Credentials{Method: MethodPassword, User: "app", Password: "app123", Addr: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()

	b, err = Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Resume(Credentials{Token: id.Token, Addr: "10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if got.User != "app" || got.Method != MethodPassword || b.CheckIdentity(*got) != nil {
		t.Fatalf("resumed %+v", got)
	}
	if err := b.Authorize(*got, OpProduce, "orders"); err != nil {
		t.Fatalf("the resumed identity lost its permissions: %v", err)
	}
	if st := b.AuthStats(); st.HashesPeak != 0 {
		t.Fatalf("resuming ran %d hashes", st.HashesPeak)
	}
	// Changing the password after the restart revokes both the token and
	// the identity resumed with it.
	if err := b.ChangePassword(ctx, "app", "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(Credentials{Token: id.Token, Addr: "10.0.0.2"}); !errors.Is(err, ErrSessionRevoked) {
		t.Fatalf("resume after a password change: %v", err)
	}
	if err := b.CheckIdentity(*got); !errors.Is(err, ErrCredentials) {
		t.Fatalf("the resumed identity after a password change: %v", err)
	}
}

// TestForgedTokensCountAgainstTheAddress: forged tokens are failed logins
// of their address, so guessing them runs into the address's limit.
func TestForgedTokensCountAgainstTheAddress(t *testing.T) {
	b, _ := openAuth(t, AuthConfig{AddrFailureBurst: 3})
	for range 3 {
		if _, err := b.Resume(Credentials{Token: "forged", Addr: "10.0.0.9"}); !errors.Is(err, ErrSessionInvalid) {
			t.Fatalf("forged token: %v", err)
		}
	}
	if _, err := b.Resume(Credentials{Token: "forged", Addr: "10.0.0.9"}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a fourth forged token: %v", err)
	}
}

// BenchmarkResume is the cost of logging a connection in by session
// token: compare with a password login's argon2id hash (tens of ms).
func BenchmarkResume(bm *testing.B) {
	b, _ := openAuth(bm, AuthConfig{})
	id, err := b.Login(context.Background(), Credentials{Method: MethodPassword, User: "app", Password: "app123", Addr: "10.0.0.1"})
	if err != nil {
		bm.Fatal(err)
	}
	cr := Credentials{Token: id.Token, Addr: "10.0.0.1"}
	for bm.Loop() {
		if _, err := b.Resume(cr); err != nil {
			bm.Fatal(err)
		}
	}
}

// BenchmarkPasswordLogin is the login resumption avoids.
func BenchmarkPasswordLogin(bm *testing.B) {
	b, _ := openAuth(bm, AuthConfig{})
	cr := Credentials{Method: MethodPassword, User: "app", Password: "app123", Addr: "10.0.0.1"}
	for bm.Loop() {
		if _, err := b.Login(context.Background(), cr); err != nil {
			bm.Fatal(err)
		}
	}
}
