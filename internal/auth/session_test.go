package auth

import (
	"encoding/base64"
	"errors"
	"reflect"
	"testing"
)

func TestSessionTokenRoundTrip(t *testing.T) {
	key := SessionKey([]byte("cluster secret"))
	want := SessionClaims{
		User: "app", Method: SessionJWT, TLS: true, OwnPerms: true, Perms: []string{PermProduce, PermConsume},
		IssuedMs: 1700000000000, ExpiresMs: 1700003600000, CredExpiresMs: 1700001800000,
		Cred: CredFingerprint("$argon2id$v=19$m=9216,t=4,p=1$c2FsdA$aGFzaA"),
	}
	tok, err := SealSession(key, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenSession(key, tok)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("opened %+v, %v; want %+v", got, err, want)
	}
}

// Every altered byte, another key, a cut token and garbage are refused.
func TestSessionTokenRefusesAlteration(t *testing.T) {
	key := SessionKey([]byte("cluster secret"))
	tok, err := SealSession(key, SessionClaims{User: "app", Method: SessionPassword, ExpiresMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 0x80
		if _, err := OpenSession(key, base64.RawURLEncoding.EncodeToString(bad)); !errors.Is(err, ErrSessionInvalid) {
			t.Fatalf("byte %d altered: %v", i, err)
		}
	}
	for name, bad := range map[string]string{
		"other key": tok, "cut": tok[:len(tok)-2], "garbage": "%%%", "empty": "",
	} {
		k := key
		if name == "other key" {
			k = SessionKey([]byte("another secret"))
		}
		if _, err := OpenSession(k, bad); !errors.Is(err, ErrSessionInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := SealSession(key, SessionClaims{User: ""}); err == nil {
		t.Error("a token for no user was sealed")
	}
}

// A new hash of the same password (a password change, or the user created
// again) has another fingerprint.
func TestCredFingerprintFollowsTheHash(t *testing.T) {
	h1, _ := HashPasswordWith("pw", Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})
	h2, _ := HashPasswordWith("pw", Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})
	if CredFingerprint(h1) == CredFingerprint(h2) {
		t.Fatal("two hashes of one password share a fingerprint")
	}
}
